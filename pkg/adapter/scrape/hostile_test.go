package scrape

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

// formats renders one text exposition as each format a target may send.
func formats(t *testing.T, text string) map[string]struct {
	ct   string
	body []byte
} {
	t.Helper()
	fams, err := decode(strings.NewReader(text), expfmt.FmtText, 1<<30, nil,
		newLimiter(Limits{MaxSeries: 1 << 30, MaxLabels: 1 << 30, MaxLabelNameLen: 1 << 30, MaxLabelValueLen: 1 << 30, MaxLabelValues: 1 << 30}, nil))
	if err != nil {
		t.Fatal(err)
	}
	var pb bytes.Buffer
	enc := expfmt.NewEncoder(&pb, expfmt.FmtProtoDelim)
	for _, mf := range fams {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	return map[string]struct {
		ct   string
		body []byte
	}{
		"text":        {ctText, []byte(text)},
		"openmetrics": {ctOM, []byte(text + "# EOF\n")},
		"protobuf":    {"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited", pb.Bytes()},
	}
}

// series writes n gauge samples of one family, each with the labels
// label(i) returns.
func series(n int, labels func(i int) string) string {
	var b strings.Builder
	b.WriteString("# TYPE m gauge\n")
	for i := range n {
		fmt.Fprintf(&b, "m{%s} %d\n", labels(i), i)
	}
	return b.String()
}

// TestScrapeLimits serves, in each format, an exposition at a limit and
// one just over it: the first is parsed, the second fails as "limit".
func TestScrapeLimits(t *testing.T) {
	lim := Limits{MaxSeries: 50, MaxLabels: 4, MaxLabelNameLen: 16, MaxLabelValueLen: 32, MaxLabelValues: 20}
	tests := []struct {
		name     string
		at, over string
	}{
		{"series",
			series(50, func(i int) string { return fmt.Sprintf(`i="%d"`, i%10) }),
			series(51, func(i int) string { return fmt.Sprintf(`i="%d"`, i%10) })},
		{"labels per series",
			series(1, func(int) string { return `a="1",b="1",c="1",d="1"` }),
			series(1, func(int) string { return `a="1",b="1",c="1",d="1",e="1"` })},
		{"label name length",
			series(1, func(int) string { return strings.Repeat("n", 16) + `="1"` }),
			series(1, func(int) string { return strings.Repeat("n", 17) + `="1"` })},
		{"label value length",
			series(1, func(int) string { return `a="` + strings.Repeat("v", 32) + `"` }),
			series(1, func(int) string { return `a="` + strings.Repeat("v", 33) + `"` })},
		{"distinct values of one label",
			series(40, func(i int) string { return fmt.Sprintf(`a="%d",b="%d"`, i%20, i%20) }),
			series(40, func(i int) string { return fmt.Sprintf(`a="%d",b="%d"`, i%21, i%20) })},
	}
	for _, tt := range tests {
		at, over := formats(t, tt.at), formats(t, tt.over)
		for f := range at {
			t.Run(tt.name+"/"+f, func(t *testing.T) {
				s := New(Config{Limits: lim})
				srv, _ := serve(t, 200, http.Header{"Content-Type": {at[f].ct}}, at[f].body)
				if _, err := s.Scrape(t.Context(), srv.URL); err != nil {
					t.Errorf("at the limit: %v", err)
				}
				srv, _ = serve(t, 200, http.Header{"Content-Type": {over[f].ct}}, over[f].body)
				_, err := s.Scrape(t.Context(), srv.URL)
				if Reason(err) != ReasonLimit {
					t.Errorf("over the limit: reason %q, want %q (err: %v)", Reason(err), ReasonLimit, err)
				}
			})
		}
	}
}

// TestScrapeLimitStopsReading serves an endless stream of small series: the
// series limit, not the body cap, must end the scrape, long before the cap.
func TestScrapeLimitStopsReading(t *testing.T) {
	const maxBytes = 64 << 20
	chunk := []byte(strings.Repeat("m{a=\"1\"} 1\n", 4096))
	stopped := make(chan error, 1)
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctText)
		for {
			if _, err := w.Write(chunk); err != nil {
				stopped <- err
				return
			}
		}
	})
	s, ct := countingScraper(Config{MaxBytes: maxBytes, Timeout: time.Minute, Limits: Limits{MaxSeries: 1000}})
	_, err := s.Scrape(t.Context(), srv.URL)
	if Reason(err) != ReasonLimit {
		t.Fatalf("reason %q, want limit (err: %v)", Reason(err), err)
	}
	if got := ct.read.Load(); got > 1<<20 {
		t.Errorf("read %d bytes to find 1,000 series of 11 bytes", got)
	}
	waitErr(t, stopped)
}

// TestDefaultLimitsFitRealExpositions parses real-sized expositions whole
// under the default limits, within one Cycle worker's guaranteed share of
// the default budget: a real vLLM server's, and a GPU exporter's on an
// 8-GPU node time-sliced among 64 pods.
func TestDefaultLimitsFitRealExpositions(t *testing.T) {
	b := newBudget(DefaultMaxInflightBytes, DefaultWorkers)
	for _, tc := range []struct {
		name string
		body []byte
		// peak bounds the lease's peak; 0: the worker's share.
		peak int64
	}{
		{"vllm fixture", readTestdata(t, "vllm.prom"), 0},
		{"simulated vllm", simulatedVLLM(t), 0},
		{"exporter, 8 GPUs, 64 pods", exporterExposition(8, 64), 8 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := b.lease(b.share)
			defer l.release()
			fams, err := decode(bytes.NewReader(tc.body), expfmt.FmtText, DefaultMaxBytes, nil, newLimiter(Limits{}.withDefaults(), l))
			if err != nil || len(fams) == 0 {
				t.Fatalf("%d families, err %v", len(fams), err)
			}
			want := tc.peak
			if want == 0 {
				want = b.share
			}
			if l.peak > want {
				t.Errorf("parsing %d bytes charged %d, want at most %d", len(tc.body), l.peak, want)
			}
			t.Logf("%d bytes, %d charged", len(tc.body), l.peak)
		})
	}
}

// exporterExposition is what a DCGM-style exporter says about gpus GPUs
// shared by pods pods: per-GPU and per-pod series of a dozen families.
func exporterExposition(gpus, pods int) []byte {
	var b bytes.Buffer
	gpuFams := []string{"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE",
		"DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
		"DCGM_FI_PROF_SM_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_DEV_XID_ERRORS"}
	for _, f := range gpuFams {
		fmt.Fprintf(&b, "# HELP %s Some help text for %s.\n# TYPE %s gauge\n", f, f, f)
		for g := range gpus {
			for p := range pods / gpus {
				fmt.Fprintf(&b, `%s{gpu="%d",UUID="GPU-0a1b2c3d-%04d-4e5f-8a9b-0c1d2e3f4a5b",device="nvidia%d",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-17",DCGM_FI_DRIVER_VERSION="550.90.07",container="server",namespace="team-%d",pod="llm-%d-%d"} 42.5`+"\n",
					f, g, g, g, p%4, g, p)
			}
		}
	}
	return b.Bytes()
}

// TestBudget checks that hostile scrapes cannot take what small ones are
// guaranteed, that none borrows more than half the pool, and that what is
// borrowed comes back.
func TestBudget(t *testing.T) {
	b := newBudget(1<<20, 4) // shares of 128 KiB, a pool of 512 KiB
	if b.share != 128<<10 || b.pool.Load() != 512<<10 || b.maxBorrow != 256<<10 {
		t.Fatalf("share %d, pool %d, max borrow %d", b.share, b.pool.Load(), b.maxBorrow)
	}
	h1, h2, h3 := b.lease(b.share), b.lease(b.share), b.lease(b.share)
	if err := h1.take(b.share + b.maxBorrow + 1); err == nil {
		t.Error("a scrape borrowed more than half the pool")
	}
	h1.release()
	for _, h := range []*lease{h1, h2} {
		if err := h.take(b.share + b.maxBorrow); err != nil {
			t.Fatalf("borrowing half the pool: %v", err)
		}
	}
	if err := h3.take(b.share + 1); err == nil {
		t.Error("borrowed from an empty pool")
	}
	small := b.lease(b.share)
	if err := small.take(b.share); err != nil {
		t.Errorf("a scrape within its share failed with the pool empty: %v", err)
	}
	for _, h := range []*lease{h1, h2, h3, small} {
		h.release()
	}
	if got := b.pool.Load(); got != 512<<10 {
		t.Errorf("pool holds %d after every lease was released, want %d", got, 512<<10)
	}
}

// TestCycleHostileTargetsDoNotStarveSmallOnes scrapes targets that each
// serve as much as the limits allow, beside small healthy ones, through a
// budget the hostile ones could exhaust many times over: the hostile ones
// fail as "limit", the small ones all succeed.
func TestCycleHostileTargetsDoNotStarveSmallOnes(t *testing.T) {
	// 3 MB, which parsed would cost 3.7 MB: more than a scrape may hold.
	hostile := []byte(series(1500, func(i int) string {
		return fmt.Sprintf(`a="%d",b="%s"`, i%1000, strings.Repeat("v", 2000))
	}))
	small := readTestdata(t, "vllm.prom")
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ctText)
		if strings.HasPrefix(r.URL.Path, "/hostile") {
			_, _ = w.Write(hostile)
			return
		}
		_, _ = w.Write(small)
	})
	ts := append(targets(srv.URL, 8, "hostile"), targets(srv.URL, 24, "small")...)
	// Shares of 256 KiB, a pool of 4 MiB: each hostile scrape may hold
	// 2.25 MiB, and eight of them would need 18.
	s := New(Config{Workers: 16, MaxInflightBytes: 8 << 20, Timeout: 30 * time.Second})
	results := make(chan Result, len(ts))
	s.Cycle(t.Context(), ts, func(r Result) { results <- r })
	close(results)
	for r := range results {
		want := ""
		if strings.HasPrefix(r.Target.Key, "hostile") {
			want = ReasonLimit
		}
		if got := Reason(r.Err); got != want {
			t.Errorf("%s: reason %q, want %q (err: %v)", r.Target.Key, got, want, r.Err)
		}
	}
	if got := s.budget.pool.Load(); got != 8<<20-s.budget.share*16 {
		t.Errorf("pool holds %d after the cycle", got)
	}
}

func newServer(t *testing.T, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}
