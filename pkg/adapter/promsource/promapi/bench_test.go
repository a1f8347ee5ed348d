package promapi

import (
	"fmt"
	"strings"
	"testing"

	jsoniter "github.com/json-iterator/go"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// v1Decode decodes an answer as client_golang's v1 API does (Do, then
// Query's queryResult, at v1.24.1), without the HTTP exchange.
func v1Decode(body []byte) (model.Vector, error) {
	var resp struct {
		Status    string              `json:"status"`
		Data      jsoniter.RawMessage `json:"data"`
		ErrorType v1.ErrorType        `json:"errorType"`
		Error     string              `json:"error"`
		Warnings  []string            `json:"warnings,omitempty"`
	}
	if err := jsoniter.Unmarshal(body, &resp); err != nil {
		return nil, err
	}
	var qr struct {
		Type   model.ValueType     `json:"resultType"`
		Result jsoniter.RawMessage `json:"result"`
	}
	if err := jsoniter.Unmarshal(resp.Data, &qr); err != nil {
		return nil, err
	}
	var vec model.Vector
	return vec, jsoniter.Unmarshal(qr.Result, &vec)
}

// answer10k is Prometheus' answer to avg by (namespace, pod) (...) over
// 10,000 pods, as bench-promql asks it.
func answer10k() []byte {
	var b strings.Builder
	b.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
	for i := range 10000 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"metric":{"namespace":"bench-promql","pod":"vllm-%05d-7d9f8c6b5-x%04d"},"value":[1733390000.123,"%g"]}`, i, i, float64(i%97)/7)
	}
	b.WriteString(`]}}`)
	return []byte(b.String())
}

// BenchmarkDecode10k: one 10,000-pod answer decoded the v1 API's way and
// promapi's.
func BenchmarkDecode10k(b *testing.B) {
	body := answer10k()
	b.Run("v1", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		for b.Loop() {
			vec, err := v1Decode(body)
			if err != nil || len(vec) != 10000 {
				b.Fatal(len(vec), err)
			}
		}
	})
	b.Run("promapi", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		b.ReportAllocs()
		labels := []string{"pod", "namespace", "Hostname", "model_name"}
		for b.Loop() {
			vec, err := decode(200, body, labels)
			if err != nil || len(vec) != 10000 {
				b.Fatal(len(vec), err)
			}
		}
	})
}

// TestDecodeAsV1 holds the benchmark's two decodings to the same samples.
func TestDecodeAsV1(t *testing.T) {
	body := answer10k()
	want, err := v1Decode(body)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decode(200, body, diffLabels)
	if err != nil {
		t.Fatal(err)
	}
	if d := diff(want, got); d != "" {
		t.Fatal(d)
	}
}
