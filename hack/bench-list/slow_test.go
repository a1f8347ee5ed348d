package main

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

func TestCountOver(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		latencies []time.Duration
		want      [len(slowBounds)]int
	}{
		{"none", nil, [3]int{}},
		{"on a bound is not over it", []time.Duration{25 * ms, 50 * ms, 100 * ms}, [3]int{2, 1, 0}},
		{"spread", []time.Duration{ms, 30 * ms, 60 * ms, 101 * ms, 2 * time.Second}, [3]int{4, 3, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := countOver(tc.latencies); got != tc.want {
				t.Errorf("countOver = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestHistogramOver(t *testing.T) {
	// apiserver_request_duration_seconds' first buckets.
	bounds := []float64{0.005, 0.025, 0.05, 0.1, 0.2, math.Inf(1)}
	for _, tc := range []struct {
		name    string
		bounds  []float64
		counts  []float64
		want    [len(slowBounds)]int
		wantErr string
	}{
		{"all fast", bounds, []float64{10, 10, 10, 10, 10, 10}, [3]int{}, ""},
		{"a tail", bounds, []float64{1, 120, 180, 197, 199, 200}, [3]int{80, 20, 3}, ""},
		{"a bound missing", []float64{0.005, 0.05, 0.1, math.Inf(1)}, []float64{1, 2, 3, 4}, [3]int{}, "no bucket bound 0.025"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := &histogram.Histogram{Bounds: tc.bounds, Counts: tc.counts, Count: tc.counts[len(tc.counts)-1]}
			got, err := histogramOver(h)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("histogramOver = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestSlowText(t *testing.T) {
	r := result{ClientSlow: [3]int{40, 12, 2}, AdapterSlow: [3]int{31, 3, 0}}
	if got, want := slowText(r), "40/31, 12/3, 2/0"; got != want {
		t.Errorf("slowText = %q, want %q", got, want)
	}
	if got, want := boundsText(), "25 / 50 / 100 ms"; got != want {
		t.Errorf("boundsText = %q, want %q", got, want)
	}
}

func TestParseMachineTicks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		raw     string
		want    machineTicks
		wantErr bool
	}{
		{"a machine", "cpu  100 5 20 800 10 1 2 3 0 0\ncpu0 50 2 10 400 5 0 1 1 0 0\n", machineTicks{busy: 131, total: 941}, false},
		{"too few fields", "cpu 1 2 3\n", machineTicks{}, true},
		{"not the cpu line", "intr 1 2 3 4 5 6 7 8 9\n", machineTicks{}, true},
		{"not a number", "cpu 1 2 x 4 5 6 7 8 9\n", machineTicks{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseMachineTicks([]byte(tc.raw))
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Errorf("parseMachineTicks = %+v, %v; want %+v, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
	if got := (machineTicks{busy: 190, total: 1100}).since(machineTicks{busy: 100, total: 1000}); got != 0.9 {
		t.Errorf("since = %v, want 0.9", got)
	}
}

func TestRequestsText(t *testing.T) {
	for _, tc := range []struct {
		r    result
		want string
	}{
		{result{Requests: 200}, "200"},
		{result{Requests: 200, Gap: 250 * time.Millisecond}, "200, 250ms apart"},
	} {
		if got := requestsText(tc.r); got != tc.want {
			t.Errorf("requestsText(%d, %v) = %q, want %q", tc.r.Requests, tc.r.Gap, got, tc.want)
		}
	}
}

func TestBurstText(t *testing.T) {
	ms := time.Millisecond
	r := result{DuringScrapes: []time.Duration{20 * ms, 40 * ms, 90 * ms}, BetweenScrapes: []time.Duration{10 * ms, 12 * ms}}
	if got, want := burstText(r), "during scrapes 3, 40ms / 90ms, between 2, 12ms / 12ms"; got != want {
		t.Errorf("burstText = %q, want %q", got, want)
	}
}
