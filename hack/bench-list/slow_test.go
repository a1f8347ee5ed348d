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
