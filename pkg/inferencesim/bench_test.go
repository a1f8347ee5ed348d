package inferencesim

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// BenchmarkEngineAdvance simulates one second at 50 requests/s per
// iteration: beyond one replica's capacity, so the batch stays full.
func BenchmarkEngineAdvance(b *testing.B) {
	e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
	if err != nil {
		b.Fatal(err)
	}
	l := NewLoad(1, nil)
	if err := l.SetRate(t0, 50); err != nil {
		b.Fatal(err)
	}
	now := t0.Add(time.Minute)
	l.Drive(e, now) // reach the saturated steady state
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Second)
		l.Drive(e, now)
	}
}

// BenchmarkScrape serves /metrics of a loaded vLLM server: render alone,
// and with the 15s of simulation a scrape interval brings.
func BenchmarkScrape(b *testing.B) {
	for _, tc := range []struct {
		name    string
		advance time.Duration
	}{{"render", 0}, {"simulate15s", 15 * time.Second}} {
		b.Run(tc.name, func(b *testing.B) {
			clock := clocktesting.NewFakeClock(t0)
			s, err := NewServer(Options{Dialect: VLLM, Rate: 12, Now: clock.Now})
			if err != nil {
				b.Fatal(err)
			}
			req := httptest.NewRequest(http.MethodGet, "/metrics", nil)
			clock.Step(time.Minute)
			b.ReportAllocs()
			for b.Loop() {
				clock.Step(tc.advance)
				w := httptest.NewRecorder()
				s.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}
