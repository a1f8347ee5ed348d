package workload

import (
	"bytes"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
)

func TestFamily(t *testing.T) {
	fam := Family()
	if len(fam) < 12 {
		t.Fatalf("%d shapes; the robustness goals ask for at least 12", len(fam))
	}
	names := map[string]bool{}
	bursty := 0
	for _, s := range fam {
		if names[s.Name] || s.Name == "" || s.About == "" {
			t.Errorf("shape %q: a name and a description, each unique, are needed", s.Name)
		}
		names[s.Name] = true
		if s.Bursty {
			bursty++
		}
		if d := s.Duration(); d < 30*time.Minute || d > time.Hour {
			t.Errorf("%s lasts %v; shapes last 30-60 minutes", s.Name, d)
		}
	}
	if bursty < 4 || bursty > len(fam)-4 {
		t.Errorf("%d of %d shapes bursty; the family needs both kinds", bursty, len(fam))
	}
}

// TestGenerateFollowsProfile draws each shape and checks the arrivals per
// minute against the profile's mean (a Poisson count is within five
// standard deviations of its mean but for one draw in millions), and the
// prompt and output medians against the mix's.
func TestGenerateFollowsProfile(t *testing.T) {
	for _, s := range append(Family(), CodeCompletion(), Burst()) {
		t.Run(s.Name, func(t *testing.T) {
			reqs := s.Generate(1)
			if !slices.IsSortedFunc(reqs, func(a, b trace.Request) int { return int(a.At - b.At) }) {
				t.Fatal("requests not in arrival order")
			}
			minutes := int(s.Duration() / time.Minute)
			counts := make([]int, minutes)
			for _, r := range reqs {
				if m := int(r.At / time.Minute); m < minutes {
					counts[m]++
				}
				if r.ContextTokens < 1 || r.GeneratedTokens < 1 {
					t.Fatalf("request %+v: token counts must be positive", r)
				}
			}
			for m, n := range counts {
				mean := 0.0
				for k := 0; k < 60; k++ { // the profile's mean over the minute
					mean += s.rateAt(float64(60*m+k)+0.5) / 60
				}
				if d := math.Abs(float64(n) - mean); d > 5*math.Sqrt(mean)+1 {
					t.Errorf("minute %d: %d arrivals, profile's mean %.1f", m, n, mean)
				}
			}
			if len(s.Mix) == 1 {
				// A sample median's logarithm has a standard error of
				// 1.2533 sigma / sqrt(n); allow four, and the rounding.
				l := s.Mix[0].Lengths
				ctx, gen := medians(reqs)
				within := func(got, median, sigma float64) bool {
					tol := 4*1.2533*sigma/math.Sqrt(float64(len(reqs))) + 1/median
					return math.Abs(math.Log(got/median)) <= tol
				}
				if !within(ctx, l.CtxMedian, l.CtxSigma) || !within(gen, l.GenMedian, l.GenSigma) {
					t.Errorf("medians %.0f/%.0f tokens of %d requests, mix's %.0f/%.0f", ctx, gen, len(reqs), l.CtxMedian, l.GenMedian)
				}
			}
		})
	}
}

func medians(reqs []trace.Request) (ctx, gen float64) {
	c := make([]int, len(reqs))
	g := make([]int, len(reqs))
	for i, r := range reqs {
		c[i], g[i] = r.ContextTokens, r.GeneratedTokens
	}
	slices.Sort(c)
	slices.Sort(g)
	return float64(c[len(c)/2]), float64(g[len(g)/2])
}

func TestGenerateIsFixedBySeed(t *testing.T) {
	s := Family()[0]
	var a, b, c bytes.Buffer
	for buf, seed := range map[*bytes.Buffer]uint64{&a: 7, &b: 7, &c: 8} {
		if err := WriteCSV(buf, s.Generate(seed)); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Error("the same seed wrote different traces")
	}
	if bytes.Equal(a.Bytes(), c.Bytes()) {
		t.Error("different seeds wrote the same trace")
	}
	back, err := trace.Read(&a)
	if err != nil {
		t.Fatal(err)
	}
	want := s.Generate(7)
	if len(back.Requests) != len(want) {
		t.Fatalf("read back %d requests, wrote %d", len(back.Requests), len(want))
	}
	for i, r := range back.Requests {
		w := want[i]
		w.At -= want[0].At
		if d := r.At - w.At; d < -time.Microsecond || d > time.Microsecond || r.ContextTokens != w.ContextTokens || r.GeneratedTokens != w.GeneratedTokens {
			t.Fatalf("request %d read back as %+v, wrote %+v", i, r, w)
		}
	}
}

// TestLongContextDrawsOversized: the long-context mix draws prompts beyond
// an L4's 32k-token KV cache, the share the production trace had.
func TestLongContextDrawsOversized(t *testing.T) {
	for _, s := range Family() {
		if s.Name != "long-context" {
			continue
		}
		reqs := s.Generate(3)
		over := 0
		for _, r := range reqs {
			if r.ContextTokens+r.GeneratedTokens > 32000 {
				over++
			}
		}
		share := float64(over) / float64(len(reqs))
		if share < 0.04 || share > 0.11 {
			t.Errorf("%.1f%% of %d requests exceed 32k tokens, want about 7%%", 100*share, len(reqs))
		}
		return
	}
	t.Fatal("no long-context shape")
}
