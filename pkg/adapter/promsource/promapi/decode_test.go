package promapi

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// The labels the differential tests keep: the adapter's, and one no
// answer here names.
var diffLabels = []string{"pod", "namespace", "model_name", "Hostname", "absent"}

// v1Vector is the reference: the same query through client_golang's v1
// API, the way this package queried before it decoded answers itself.
func v1Vector(ctx context.Context, c *Client, q string) (vec model.Vector, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	val, _, err := v1.NewAPI(c.client).Query(ctx, q, t0, v1.WithTimeout(c.timeout), v1.WithLookbackDelta(c.lookback))
	if err != nil {
		return nil, err
	}
	vec, ok := val.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("got %v, want an instant vector", val)
	}
	for _, s := range vec {
		if s == nil {
			// `[null]`: the adapter would have panicked on it.
			return nil, errors.New("a null sample")
		}
	}
	return vec, nil
}

// diff describes how got differs from want, "" where it does not.
func diff(want model.Vector, got []Sample) string {
	if len(want) != len(got) {
		return fmt.Sprintf("%d samples, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := &got[i]
		for j, l := range diffLabels {
			wv, wok := w.Metric[model.LabelName(l)]
			if gv, gok := g.Label(j); gv != string(wv) || gok != wok {
				return fmt.Sprintf("sample %d: label %s = %q (%t), want %q (%t)", i, l, gv, gok, wv, wok)
			}
		}
		wf := float64(w.Value)
		if math.Float64bits(wf) != math.Float64bits(g.Value) && !(math.IsNaN(wf) && math.IsNaN(g.Value)) {
			return fmt.Sprintf("sample %d: value %v, want %v", i, g.Value, wf)
		}
		if g.Timestamp != w.Timestamp {
			return fmt.Sprintf("sample %d: time %d, want %d", i, g.Timestamp, w.Timestamp)
		}
	}
	return ""
}

// answering is a server that answers every query with the status and
// body last set.
type answering struct {
	mu     sync.Mutex
	status int
	body   string
}

func (a *answering) set(status int, body string) {
	a.mu.Lock()
	a.status, a.body = status, body
	a.mu.Unlock()
}

func (a *answering) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	st, b := a.status, a.body
	a.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(st)
	fmt.Fprint(w, b)
}

// compare runs one answer through both decodings: the samples are the
// same, or both fail, or promapi alone fails with errStricter (an answer
// the v1 API made samples up for).
func compare(t *testing.T, c *Client, status int, body string) (strict bool) {
	t.Helper()
	want, wantErr := v1Vector(context.Background(), c, "q")
	got, err := c.Vector(context.Background(), "q", t0, diffLabels...)
	switch {
	case err == nil && wantErr != nil:
		t.Fatalf("status %d, body %q: promapi took it (%d samples), the v1 API did not: %v", status, body, len(got), wantErr)
	case err != nil && wantErr == nil:
		if !errors.Is(err, errStricter) {
			t.Fatalf("status %d, body %q: the v1 API took it (%d samples), promapi did not: %v", status, body, len(want), err)
		}
		return true
	case err == nil:
		if d := diff(want, got); d != "" {
			t.Fatalf("status %d, body %q: %s", status, body, d)
		}
	}
	return false
}

func diffServer(t testing.TB) (*answering, *Client) {
	a := &answering{status: 200}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, client(t, srv.URL, 1<<20)
}

// Answers for the differential tests, real ones first.
var diffSeeds = []struct {
	status int
	body   string
}{
	// Prometheus v3.5's answer to avg by (namespace, pod) (...).
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"namespace":"bench","pod":"vllm-0"},"value":[1733390000.123,"0.5"]},{"metric":{"namespace":"bench","pod":"vllm-1"},"value":[1733390000.123,"NaN"]}]}}`},
	// With a warning, and the infos Prometheus 3 adds.
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1733390000,"+Inf"]}]},"warnings":["PromQL warning: x"],"infos":["PromQL info: y"]}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
	{422, `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`},
	{400, `{"status":"error","errorType":"bad_data","error":"invalid parameter \"query\": 1:1: parse error"}`},
	{503, `{"status":"error","errorType":"unavailable","error":"too many queries"}`},
	{422, `{"status":"success","data":{"resultType":"vector","result":[]}}`},
	{200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}`},
	{200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}`},
	{200, `{}`},
	{200, ``},
	{204, ``},
	{200, `null`},
	{200, `<html>proxy</html>`},
	// Escapes, unicode, UTF-8 label names, huge and odd numbers.
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a\"b\\c\u00e9\ud83d\ude00","namespace":"\u0000\t","model_name":"Llama 3 🦙","üñî":"x"},"value":[1e0,"1e308"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"\ud800"},"value":[-1.5,"-0"]},{"metric":{"pod":"\udc00\u0041"},"value":[1.23456789,"0x1p-2"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[99999999999999999999,"1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1e300,"1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1.2345e3,"1e400"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"inf"]},{"metric":{"pod":"b"},"value":[1,"nan"]},{"metric":{"pod":"c"},"value":[1,"-Infinity"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"1_0"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"\u0031"]}]}}`},
	// Duplicate keys: the last counts, and metrics merge.
	{200, `{"status":"error","status":"success","data":{"resultType":"matrix"},"data":{"resultType":"vector","result":[{"metric":{"pod":"a","pod":"b"},"metric":{"namespace":"n"},"value":[1,"1"],"value":[2,"2"]}]}}`},
	{200, `{"status":"success","data":{"result":[{"metric":{"pod":"a"},"value":[1,"1"]}],"resultType":"vector"}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"1"]}],"resultType":"matrix"}}`},
	{200, `{"Status":"success","DATA":{"ResultType":"vector","Result":[{"Metric":{"pod":"a"},"VALUE":[1,"1"]}]}}`},
	// Wrong types.
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":1},"value":[1,"1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":["1","1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,1]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":{}}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[1]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[null]}}`},
	{200, `{"status":1,"data":{"resultType":"vector","result":[]}}`},
	{200, `{"status":"success","warnings":[1],"data":{"resultType":"vector","result":[]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[]}} x`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[01,"1"]}]}}`},
	// What the v1 API made samples up for.
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"}}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":null}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[null,"1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1,"1",2]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":null},"value":[1,"1"]}]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":null}}`},
	{200, `{"status":"","data":{"resultType":"vector","result":[]}}`},
	{200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"histogram":[1,{"count":"1","sum":"1"}]}]}}`},
	{200, "{\"status\":\"success\",\"data\":{\"resultType\":\"vector\",\"result\":[{\"metric\":{\"pod\":\"a\xff\"},\"value\":[1,\"1\"]}]}}"},
}

// TestAgreesWithV1: each seed decodes as the v1 API decoded it, or, for
// those the v1 API made samples up for, is an errStricter error.
func TestAgreesWithV1(t *testing.T) {
	a, c := diffServer(t)
	for _, s := range diffSeeds {
		a.set(s.status, s.body)
		compare(t, c, s.status, s.body)
	}
}

// TestStricterThanV1: the answers the v1 API took and promapi refuses
// are only the malformed ones it made samples up for; a real answer is
// never among them.
func TestStricterThanV1(t *testing.T) {
	a, c := diffServer(t)
	var strict []string
	for _, s := range diffSeeds {
		a.set(s.status, s.body)
		if compare(t, c, s.status, s.body) {
			strict = append(strict, s.body)
		}
	}
	for _, b := range strict {
		if strings.Contains(b, "1733390000") {
			t.Errorf("a real answer refused: %s", b)
		}
	}
	if len(strict) != 9 {
		t.Errorf("%d answers refused that the v1 API took, want the 9 seeds for it:\n%s", len(strict), strings.Join(strict, "\n"))
	}
}

// FuzzVectorDecode: whatever a server answers (any status, any body),
// promapi's decoding agrees with the v1 API's, or is stricter where the
// v1 API made samples up; never does it take an answer the v1 API
// refused or decode one differently.
func FuzzVectorDecode(f *testing.F) {
	for _, s := range diffSeeds {
		f.Add(s.status, s.body)
	}
	a, c := diffServer(f)
	f.Fuzz(func(t *testing.T, st int, b string) {
		if st < 200 || st > 599 {
			st = 200
		}
		a.set(st, b)
		compare(t, c, st, b)
	})
}
