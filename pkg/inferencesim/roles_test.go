package inferencesim

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// TestKVReadyRequestDecodesAtOnce: a request whose KV arrives computed
// (disaggregation's decode side) prefills nothing: its first token comes at
// the end of its first step, it holds its whole context in the KV cache
// from admission, and it never spends prefill budget that a prompt behind
// it could use.
func TestKVReadyRequestDecodesAtOnce(t *testing.T) {
	p := L4Profile()
	e, err := NewEngine(p, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	var ttfts []time.Duration
	e.SetHooks(Hooks{FirstToken: func(d time.Duration) { ttfts = append(ttfts, d) }})
	if err := e.SubmitAt(t0, Request{ContextTokens: 3000, GeneratedTokens: 10, KVReady: true}); err != nil {
		t.Fatal(err)
	}
	e.Advance(t0.Add(time.Millisecond))
	if st := e.Peek(); st.Running != 1 || st.KVCacheUsedTokens != 3000 {
		t.Fatalf("after admission: %+v, want 1 running holding its 3000-token context", st)
	}
	e.Advance(t0.Add(10 * time.Second))
	if len(ttfts) != 1 || ttfts[0] != p.stepTime(1) {
		t.Fatalf("TTFT %v, want one step (%v)", ttfts, p.stepTime(1))
	}
	if st := e.Peek(); st.PromptTokens != 0 || st.GenerationTokens != 10 || st.Completed != 1 {
		t.Fatalf("stats %+v: want no prompt tokens prefilled, 10 generated, 1 completed", st)
	}
	// A prompt to prefill and a transferred request behind it: the
	// transferred one is admitted in the same step even though the
	// prompt takes the step's whole prefill budget.
	e2, _ := NewEngine(p, func() time.Time { return t0 })
	_ = e2.SubmitAt(t0, Request{ContextTokens: 20000, GeneratedTokens: 2})
	_ = e2.SubmitAt(t0, Request{ContextTokens: 500, GeneratedTokens: 2, KVReady: true})
	e2.Advance(t0.Add(time.Millisecond))
	if st := e2.Peek(); st.Running != 2 || st.Waiting != 0 {
		t.Fatalf("%+v: want both admitted", st)
	}
}

// TestTokenHookGaps: every output token after the first is heard with the
// time since the one before, which for a lone request is one step each.
func TestTokenHookGaps(t *testing.T) {
	p := L4Profile()
	e, err := NewEngine(p, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	var gaps []time.Duration
	e.SetHooks(Hooks{Token: func(d time.Duration) { gaps = append(gaps, d) }})
	_ = e.SubmitAt(t0, Request{ContextTokens: 100, GeneratedTokens: 6})
	_ = e.SubmitAt(t0.Add(time.Minute), Request{ContextTokens: 100, GeneratedTokens: 1})
	e.Advance(t0.Add(2 * time.Minute))
	if len(gaps) != 5 {
		t.Fatalf("%d gaps, want 5 (6 tokens, and none for a one-token request)", len(gaps))
	}
	for _, g := range gaps {
		if g != p.stepTime(1) {
			t.Errorf("gap %v, want one step %v", g, p.stepTime(1))
		}
	}
}

// TestITLExposedPerDialect: what each simulated dialect exposes is what
// the adapter reads as ITL (pkg/adapter/inference), as the dialect table says:
// every token gap for vLLM and SGLang, each multi-token request's mean gap
// for TGI (PerRequestMean), nothing for Triton (no ITL family).
func TestITLExposedPerDialect(t *testing.T) {
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) {
			s, clock, hs := newTestServer(t, Options{Dialect: d, Rate: 8, Seed: 3})
			clock.Step(40 * time.Second)
			fams, _, _ := scrape(t, hs.URL, "")
			st := s.Stats()
			sig, err := inference.Detect(fams)
			if err != nil {
				t.Fatal(err)
			}
			e, _ := dialect.Lookup(d)
			switch {
			case !e.Has(dialect.ITL):
				if sig.ITL != nil {
					t.Fatalf("%s has an ITL: %+v", d, sig.ITL)
				}
				return
			case e.Reads[dialect.ITL].PerRequestMean:
				if sig.ITL == nil || sig.ITL.Count != float64(st.Completed) {
					t.Fatalf("%s ITL %+v, want one observation per completed request (%d)", d, sig.ITL, st.Completed)
				}
				return
			}
			if sig.ITL == nil || sig.TTFT == nil {
				t.Fatalf("no ITL (%v) or TTFT (%v)", sig.ITL, sig.TTFT)
			}
			// Every generated token but each request's first is a gap.
			if want := float64(st.GenerationTokens) - sig.TTFT.Count; sig.ITL.Count != want || want <= 0 {
				t.Fatalf("ITL counts %v gaps, want %v (%d tokens, %v first tokens)", sig.ITL.Count, want, st.GenerationTokens, sig.TTFT.Count)
			}
			if mean := sig.ITL.Sum / sig.ITL.Count; mean < L4Profile().DecodeBaseStep.Seconds()/10 || mean > 1 {
				t.Errorf("mean gap %vs is no decode step", mean)
			}
		})
	}
}
