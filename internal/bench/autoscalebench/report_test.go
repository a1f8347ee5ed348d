package autoscalebench

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// served and unserved build request outcomes tersely: arrival and TTFT in
// seconds.
func served(arrival, ttft float64) RequestOutcome {
	return RequestOutcome{Arrival: secs(arrival), TTFT: secs(ttft), Served: true}
}

func unserved(arrival float64) RequestOutcome {
	return RequestOutcome{Arrival: secs(arrival)}
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// sameFloat treats NaN as equal to NaN and compares the rest to 1e-9, so
// that expected +Inf and NaN can sit in tables.
func sameFloat(a, b float64) bool {
	if math.IsNaN(a) || math.IsNaN(b) {
		return math.IsNaN(a) && math.IsNaN(b)
	}
	if math.IsInf(a, 0) || math.IsInf(b, 0) {
		return a == b
	}
	return math.Abs(a-b) <= 1e-9
}

func sameFloats(a, b []float64) bool {
	return slices.EqualFunc(a, b, sameFloat)
}

func TestNearestRank(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name   string
		sorted []float64
		p      int
		want   float64
	}{
		{"empty", nil, 90, math.NaN()},
		{"single", []float64{4}, 50, 4},
		{"p50 of 10 is 5th", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 50, 5},
		{"p90 of 10 is 9th", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 90, 9},
		{"p99 of 10 is 10th", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 99, 10},
		{"p90 of 11 is 10th", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 90, 10},
		{"p90 of 3 is 3rd", []float64{1, 2, 3}, 90, 3},
		{"p50 of 2 is 1st", []float64{1, 2}, 50, 1},
		{"unserved tail", []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, inf}, 90, 9},
		{"p90 on unserved", []float64{1, 2, 3, 4, 5, 6, 7, 8, inf, inf}, 90, inf},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := nearestRank(tt.sorted, tt.p); !sameFloat(got, tt.want) {
				t.Errorf("nearestRank(%v, %d) = %v, want %v", tt.sorted, tt.p, got, tt.want)
			}
		})
	}
}

func TestSummarizeQuantiles(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name                      string
		reqs                      []RequestOutcome
		wantP50, wantP90, wantP99 float64
		wantServed, wantUnserved  int
	}{
		{
			name:    "no requests",
			wantP50: math.NaN(), wantP90: math.NaN(), wantP99: math.NaN(),
		},
		{
			// Sorted 1..9, +Inf: ranks 5, 9 and 10.
			name: "one unserved of ten, out of order",
			reqs: []RequestOutcome{served(0, 9), served(1, 1), unserved(2), served(3, 5),
				served(4, 2), served(5, 8), served(6, 3), served(7, 7), served(8, 4), served(9, 6)},
			wantP50: 5, wantP90: 9, wantP99: inf, wantServed: 9, wantUnserved: 1,
		},
		{
			name:    "all unserved",
			reqs:    []RequestOutcome{unserved(0), unserved(1)},
			wantP50: inf, wantP90: inf, wantP99: inf, wantUnserved: 2,
		},
		{
			name:    "sub-second",
			reqs:    []RequestOutcome{served(0, 0.25), served(1, 0.5), served(2, 0.125)},
			wantP50: 0.25, wantP90: 0.5, wantP99: 0.5, wantServed: 3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := Recording{Duration: time.Minute, Policies: []PolicyRecording{{Policy: "p", Requests: tt.reqs}}}
			s := Summarize(rec)[0]
			if !sameFloat(s.TTFTP50, tt.wantP50) || !sameFloat(s.TTFTP90, tt.wantP90) || !sameFloat(s.TTFTP99, tt.wantP99) {
				t.Errorf("p50/p90/p99 = %v/%v/%v, want %v/%v/%v",
					s.TTFTP50, s.TTFTP90, s.TTFTP99, tt.wantP50, tt.wantP90, tt.wantP99)
			}
			if s.Served != tt.wantServed || s.Unserved != tt.wantUnserved {
				t.Errorf("served/unserved = %d/%d, want %d/%d", s.Served, s.Unserved, tt.wantServed, tt.wantUnserved)
			}
		})
	}
}

func TestMinuteP90AndSLOMinutes(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name      string
		duration  time.Duration
		slo       time.Duration
		reqs      []RequestOutcome
		wantP90   []float64
		wantMet   int
		wantTotal int
	}{
		{
			// Minute 1 is empty and counts nowhere; the partial last
			// minute [120s,150s) has an unserved request at rank 2 of 2;
			// the request at 150s is past the slice.
			name:     "empty minute and partial last minute",
			duration: 150 * time.Second, slo: 2 * time.Second,
			reqs:    []RequestOutcome{served(0, 1), served(30, 1), served(59.9, 1), served(125, 1), unserved(140), served(150, 0.5)},
			wantP90: []float64{1, nan, inf}, wantMet: 1, wantTotal: 2,
		},
		{
			name:     "p90 equal to SLO is met",
			duration: time.Minute, slo: 2 * time.Second,
			reqs:    []RequestOutcome{served(1, 2), served(2, 0.5)},
			wantP90: []float64{2}, wantMet: 1, wantTotal: 1,
		},
		{
			// Ten requests, one slow: p90 is the 9th, still fast.
			name:     "one slow of ten is met, two are not",
			duration: 2 * time.Minute, slo: time.Second,
			reqs: append(
				tenRequests(0, 0.5, 1),
				tenRequests(60, 0.5, 2)...),
			wantP90: []float64{0.5, 5}, wantMet: 1, wantTotal: 2,
		},
		{
			name:     "partial last minute without requests is excluded",
			duration: 90 * time.Second, slo: time.Second,
			reqs:    []RequestOutcome{served(10, 3)},
			wantP90: []float64{3, nan}, wantMet: 0, wantTotal: 1,
		},
		{name: "zero duration", duration: 0, slo: time.Second, reqs: []RequestOutcome{served(0, 1)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := PolicyRecording{Requests: tt.reqs}
			got := MinuteP90(p, tt.duration)
			if !sameFloats(got, tt.wantP90) {
				t.Errorf("MinuteP90 = %v, want %v", got, tt.wantP90)
			}
			rec := Recording{Duration: tt.duration, SLO: tt.slo, Policies: []PolicyRecording{p}}
			s := Summarize(rec)[0]
			if s.MinutesMet != tt.wantMet || s.Minutes != tt.wantTotal {
				t.Errorf("minutes met = %d/%d, want %d/%d", s.MinutesMet, s.Minutes, tt.wantMet, tt.wantTotal)
			}
			if want := ratioOrNaN(tt.wantMet, tt.wantTotal); !sameFloat(s.MinutesMetShare, want) {
				t.Errorf("share = %v, want %v", s.MinutesMetShare, want)
			}
		})
	}
}

// tenRequests returns ten requests from start, slow of them with a 5 s TTFT
// and the rest with fast.
func tenRequests(start, fast float64, slow int) []RequestOutcome {
	var out []RequestOutcome
	for i := range 10 {
		ttft := fast
		if i < slow {
			ttft = 5
		}
		out = append(out, served(start+float64(i), ttft))
	}
	return out
}

func ratioOrNaN(a, b int) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

func TestBucketP90Fine(t *testing.T) {
	p := PolicyRecording{Requests: []RequestOutcome{served(1, 0.5), served(12, 2), unserved(25), served(29, 1)}}
	got := BucketP90(p, 35*time.Second, 10*time.Second)
	want := []float64{0.5, 2, math.Inf(1), math.NaN()}
	if !sameFloats(got, want) {
		t.Errorf("BucketP90 = %v, want %v", got, want)
	}
}

func pods(at float64, n int) Sample { return Sample{At: secs(at), Pods: n} }

func TestGPUSeconds(t *testing.T) {
	tests := []struct {
		name     string
		samples  []Sample
		duration time.Duration
		want     float64
	}{
		{"no samples", nil, 100 * time.Second, 0},
		{"first sample covers the time before it", []Sample{pods(30, 2)}, 100 * time.Second, 200},
		{"steps", []Sample{pods(0, 1), pods(10, 3), pods(40, 2)}, 100 * time.Second, 1*10 + 3*30 + 2*60},
		{"sample past the slice is ignored", []Sample{pods(0, 1), pods(50, 5), pods(120, 9)}, 100 * time.Second, 1*50 + 5*50},
		{"samples at the same instant", []Sample{pods(0, 1), pods(10, 2), pods(10, 4)}, 20 * time.Second, 1*10 + 4*10},
		{"zero pods", []Sample{pods(0, 0), pods(50, 1)}, 60 * time.Second, 10},
		// Two groups of a leader and a worker with 4 GPUs each; then one
		// group and a deleted one still draining its 8.
		{"multi-pod replicas bill their GPUs", []Sample{{At: 0, Pods: 4, GPUs: 16}, {At: secs(50), Pods: 2, GPUs: 16}, {At: secs(60), Pods: 2, GPUs: 8}},
			100 * time.Second, 16*60 + 8*40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := GPUSeconds(tt.samples, tt.duration); !sameFloat(got, tt.want) {
				t.Errorf("GPUSeconds = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSummarizeBill(t *testing.T) {
	samples := []Sample{
		{At: 0, Desired: 1, Ready: 0, Pods: 1},
		{At: 10 * time.Second, Desired: 3, Ready: 1, Pods: 3},
		{At: 40 * time.Second, Desired: 2, Ready: 2, Pods: 2},
	}
	tests := []struct {
		name       string
		static     int
		wantFrac   float64
		wantHours  float64
		wantGPUSec float64
	}{
		{"static of two", 2, 220.0 / 200, 220.0 / 3600, 220},
		{"static of four", 4, 220.0 / 400, 220.0 / 3600, 220},
		{"no static bill", 0, math.NaN(), 220.0 / 3600, 220},
	}
	// Summarize also counts aborted requests, the streams among them, and
	// how a static bill of multi-GPU replicas is sized: see
	// TestSummarizeAborted and TestSummarizeGroupBill.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := Recording{Duration: 100 * time.Second, StaticReplicas: tt.static,
				Policies: []PolicyRecording{{Samples: samples}}}
			s := Summarize(rec)[0]
			if !sameFloat(s.GPUSeconds, tt.wantGPUSec) || !sameFloat(s.GPUHours, tt.wantHours) {
				t.Errorf("GPU-seconds/hours = %v/%v, want %v/%v", s.GPUSeconds, s.GPUHours, tt.wantGPUSec, tt.wantHours)
			}
			if !sameFloat(s.StaticFraction, tt.wantFrac) {
				t.Errorf("static fraction = %v, want %v", s.StaticFraction, tt.wantFrac)
			}
			if s.PeakReplicas != 3 || s.PeakDesired != 3 {
				t.Errorf("peaks = %d/%d, want 3/3", s.PeakReplicas, s.PeakDesired)
			}
		})
	}
}

func TestScaleEvents(t *testing.T) {
	tests := []struct {
		name      string
		desired   []int
		ups, down int
	}{
		{"none", nil, 0, 0},
		{"single", []int{3}, 0, 0},
		{"flat", []int{2, 2, 2}, 0, 0},
		{"mixed", []int{1, 2, 2, 3, 1, 1, 4}, 3, 1},
		{"jumps count once", []int{1, 8, 1}, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var samples []Sample
			for i, d := range tt.desired {
				samples = append(samples, Sample{At: time.Duration(i) * time.Second, Desired: d})
			}
			ups, downs := scaleEvents(samples)
			if ups != tt.ups || downs != tt.down {
				t.Errorf("scaleEvents(%v) = %d up, %d down, want %d, %d", tt.desired, ups, downs, tt.ups, tt.down)
			}
		})
	}
}

func TestJSONFloatRoundTrip(t *testing.T) {
	tests := []struct {
		v    float64
		want string
	}{
		{1.5, "1.5"},
		{0, "0"},
		{math.Inf(1), `"+Inf"`},
		{math.Inf(-1), `"-Inf"`},
		{math.NaN(), "null"},
	}
	for _, tt := range tests {
		b, err := json.Marshal(JSONFloat(tt.v))
		if err != nil {
			t.Fatalf("marshal %v: %v", tt.v, err)
		}
		if string(b) != tt.want {
			t.Errorf("marshal %v = %s, want %s", tt.v, b, tt.want)
		}
		var back JSONFloat
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("unmarshal %s: %v", b, err)
		}
		if !sameFloat(float64(back), tt.v) {
			t.Errorf("round trip of %v gave %v", tt.v, back)
		}
	}
	var f JSONFloat
	if err := json.Unmarshal([]byte(`"lots"`), &f); err == nil {
		t.Errorf("unmarshal of a bad string succeeded with %v", f)
	}
}

func TestFormatting(t *testing.T) {
	tests := []struct {
		v    float64
		sig  string
		perc string
	}{
		{0.123456, "0.123", "12%"},
		{1.5, "1.5", "150%"},
		{12.3, "12.3", "1230%"},
		{1234.4, "1234", "123440%"},
		{math.Inf(1), "inf", "n/a"},
		{math.NaN(), "n/a", "n/a"},
	}
	for _, tt := range tests {
		if got := fmtSig(tt.v); got != tt.sig {
			t.Errorf("fmtSig(%v) = %q, want %q", tt.v, got, tt.sig)
		}
		if got := fmtPercent(tt.v); got != tt.perc {
			t.Errorf("fmtPercent(%v) = %q, want %q", tt.v, got, tt.perc)
		}
	}
	if got := mdEscape("a | b"); !strings.Contains(got, `a \| b`) {
		t.Errorf("mdEscape = %q", got)
	}
}

func TestSummarizeAborted(t *testing.T) {
	reqs := []RequestOutcome{
		{Served: true},
		{Served: true, Aborted: true}, // a stream cut mid-way
		{Aborted: true},               // killed in the queue: unserved too
		{},                            // never reached a replica
		{Rejected: true},
	}
	s := Summarize(Recording{Duration: time.Minute, Policies: []PolicyRecording{{Requests: reqs}}})[0]
	if s.Aborted != 2 || s.AbortedStreams != 1 || s.Served != 2 || s.Unserved != 2 || s.Rejected != 1 {
		t.Errorf("aborted %d (streams %d), served %d, unserved %d, rejected %d; want 2 (1), 2, 2, 1",
			s.Aborted, s.AbortedStreams, s.Served, s.Unserved, s.Rejected)
	}
	md := markdown(Recording{Duration: time.Minute}, []Summary{s})
	if !strings.Contains(md, "| 2 of 4 | 2 (1) |") {
		t.Errorf("the report's row lacks unserved and aborted beside it:\n%s", md)
	}
}

func TestSummarizeGroupBill(t *testing.T) {
	// Two replicas of 8 GPUs each for 100 s: static's bill, whatever the
	// pods per replica.
	rec := Recording{Duration: 100 * time.Second, StaticReplicas: 2, GPUsPerReplica: 8,
		Policies: []PolicyRecording{{Samples: []Sample{{Pods: 4, GPUs: 16}}}}}
	if s := Summarize(rec)[0]; !sameFloat(s.GPUSeconds, 1600) || !sameFloat(s.StaticFraction, 1) {
		t.Errorf("GPU-seconds %v, static fraction %v; want 1600, 1", s.GPUSeconds, s.StaticFraction)
	}
}
