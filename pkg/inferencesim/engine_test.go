package inferencesim

import (
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// sim is an engine fed by a Poisson load, observed every tick.
type sim struct {
	t     *testing.T
	e     *Engine
	l     *Load
	now   time.Time
	ttfts []time.Duration
	// Waiting and TTFT samples, for averages over a run.
	waitingSum, samples int
}

func newSim(t *testing.T, p Profile, rate float64, seed uint64) *sim {
	t.Helper()
	e, err := NewEngine(p, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	s := &sim{t: t, e: e, l: NewLoad(seed, nil), now: t0}
	e.SetHooks(Hooks{FirstToken: func(d time.Duration) { s.ttfts = append(s.ttfts, d) }})
	if err := s.l.SetRate(t0, rate); err != nil {
		t.Fatal(err)
	}
	return s
}

// run drives the simulation for d in 100ms ticks, checking the engine's
// invariants at each.
func (s *sim) run(d time.Duration) {
	s.t.Helper()
	for end := s.now.Add(d); s.now.Before(end); {
		s.now = s.now.Add(100 * time.Millisecond)
		s.l.Drive(s.e, s.now)
		checkInvariants(s.t, s.e)
		s.waitingSum += s.e.Peek().Waiting
		s.samples++
	}
}

func (s *sim) meanWaiting() float64 { return float64(s.waitingSum) / float64(s.samples) }

func checkInvariants(t *testing.T, e *Engine) {
	t.Helper()
	st := e.Peek()
	if st.KVCacheUsedTokens < 0 || st.KVCacheUsedTokens > e.p.KVCacheTokens {
		t.Fatalf("KV cache holds %d tokens, capacity %d", st.KVCacheUsedTokens, e.p.KVCacheTokens)
	}
	if st.Running > e.p.MaxBatch {
		t.Fatalf("%d running, max batch %d", st.Running, e.p.MaxBatch)
	}
	held := 0
	for _, s := range e.running {
		held += s.kvHeld
	}
	if held != st.KVCacheUsedTokens {
		t.Fatalf("running requests hold %d KV tokens, engine counts %d", held, st.KVCacheUsedTokens)
	}
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestIsolatedRequestTTFTIsPrefillTime(t *testing.T) {
	p := DefaultProfile()
	for _, ctx := range []int{100, 1000, 4000, 16000} {
		e, err := NewEngine(p, func() time.Time { return t0 })
		if err != nil {
			t.Fatal(err)
		}
		var ttfts []time.Duration
		e.SetHooks(Hooks{FirstToken: func(d time.Duration) { ttfts = append(ttfts, d) }})
		// Requests two seconds apart never overlap.
		for i := range 5 {
			if err := e.SubmitAt(t0.Add(time.Duration(i)*2*time.Second), Request{ContextTokens: ctx, GeneratedTokens: 20}); err != nil {
				t.Fatal(err)
			}
		}
		e.Advance(t0.Add(20 * time.Second))
		prefill := time.Duration(float64(ctx) / p.PrefillTokensPerSec * float64(time.Second))
		for _, got := range ttfts {
			// Step quantization adds at most one step to the prefill time.
			if got < prefill || got > prefill+p.stepTime(1) {
				t.Errorf("context %d: TTFT %v, want prefill time %v plus at most one step", ctx, got, prefill)
			}
		}
		if st := e.Peek(); len(ttfts) != 5 || st.Completed != 5 || st.Waiting != 0 || st.Running != 0 {
			t.Errorf("context %d: %d TTFTs, stats %+v; want 5 completed and an empty engine", ctx, len(ttfts), st)
		}
	}
}

func TestLowRateKeepsQueueEmpty(t *testing.T) {
	s := newSim(t, DefaultProfile(), 0.5, 1)
	s.run(10 * time.Minute)
	if s.meanWaiting() > 0.01 {
		t.Errorf("mean queue length %.3f at 0.5 req/s, want about 0", s.meanWaiting())
	}
	prefill := time.Duration(float64(DefaultRequest.ContextTokens) / DefaultProfile().PrefillTokensPerSec * float64(time.Second))
	if m := median(s.ttfts); m < prefill || m > prefill+2*DefaultProfile().stepTime(2) {
		t.Errorf("median TTFT %v at 0.5 req/s, want about the prefill time %v", m, prefill)
	}
}

func TestOverloadGrowsQueueAndTTFT(t *testing.T) {
	var lastQueue int
	for _, rate := range []float64{20, 30, 45} {
		s := newSim(t, DefaultProfile(), rate, 7)
		s.run(30 * time.Second)
		early := s.e.Peek().Waiting
		firstTTFTs := len(s.ttfts)
		s.run(30 * time.Second)
		late := s.e.Peek().Waiting
		if early == 0 || late <= early {
			t.Errorf("rate %v: queue %d after 30s and %d after 60s, want a growing queue", rate, early, late)
		}
		if before, after := mean(s.ttfts[:firstTTFTs]), mean(s.ttfts[firstTTFTs:]); after < 2*before {
			t.Errorf("rate %v: mean TTFT %v in the first 30s and %v in the next, want it to grow with the queue", rate, before, after)
		}
		if late <= lastQueue {
			t.Errorf("rate %v: queue %d after 60s, not longer than %d at the lower rate", rate, late, lastQueue)
		}
		lastQueue = late
	}
}

// Splitting a load over two replicas must lower queue and TTFT: the
// property the HPA tests rely on.
func TestTwoReplicasBeatOne(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		// maxRatio bounds the pair's mean TTFT as a share of the single
		// replica's: the gain grows with the single replica's load.
		maxRatio float64
	}{
		{rate: 8, maxRatio: 0.9},
		{rate: 14, maxRatio: 0.5},
		{rate: 24, maxRatio: 0.05}, // beyond one replica's capacity
	} {
		one := newSim(t, DefaultProfile(), tc.rate, 11)
		one.run(2 * time.Minute)
		a, b := newSim(t, DefaultProfile(), tc.rate/2, 12), newSim(t, DefaultProfile(), tc.rate/2, 13)
		a.run(2 * time.Minute)
		b.run(2 * time.Minute)
		pairWaiting := (a.meanWaiting() + b.meanWaiting()) / 2
		if pairWaiting > one.meanWaiting() {
			t.Errorf("rate %v: mean queue %.2f on two replicas, %.2f on one", tc.rate, pairWaiting, one.meanWaiting())
		}
		pairTTFT := mean(append(slices.Clone(a.ttfts), b.ttfts...))
		if singleTTFT := mean(one.ttfts); float64(pairTTFT) > tc.maxRatio*float64(singleTTFT) {
			t.Errorf("rate %v: mean TTFT %v on two replicas, %v on one; want at most %.0f%% of it",
				tc.rate, pairTTFT, singleTTFT, 100*tc.maxRatio)
		}
	}
}

// fastPrefill makes prefill nearly instant so that only the KV cache limits
// admission.
func fastPrefill(kv int) Profile {
	p := DefaultProfile()
	p.PrefillTokensPerSec = 1e9
	p.KVCacheTokens = kv
	return p
}

func TestKVCacheLimitsAdmission(t *testing.T) {
	e, err := NewEngine(fastPrefill(10_000), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if err := e.SubmitAt(t0, Request{ContextTokens: 3000, GeneratedTokens: 50}); err != nil {
			t.Fatal(err)
		}
	}
	e.Advance(t0.Add(time.Microsecond))
	// Three prompts of 3000 tokens and their first tokens fit in 10000.
	if st := e.Peek(); st.Running != 3 || st.Waiting != 2 || st.KVCacheUsedTokens != 9000 {
		t.Fatalf("stats %+v, want 3 running, 2 waiting, 9000 KV tokens", st)
	}
	e.Advance(t0.Add(10 * time.Second))
	if st := e.Peek(); st.Completed != 5 || st.KVCacheUsedTokens != 0 || st.Preemptions != 0 {
		t.Errorf("stats %+v, want all 5 completed without preemption and the cache empty", st)
	}
}

func TestKVOverflowPreemptsNewest(t *testing.T) {
	e, err := NewEngine(fastPrefill(10_000), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	var firstTokens int
	var finished []int
	e.SetHooks(Hooks{
		FirstToken: func(time.Duration) { firstTokens++ },
		Finished:   func(c Completion) { finished = append(finished, c.ContextTokens) },
	})
	// Three requests that fit at admission but outgrow the cache at
	// 3 x (3000 + 333) tokens.
	for i := range 3 {
		if err := e.SubmitAt(t0, Request{ContextTokens: 3000 + i, GeneratedTokens: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	for now := t0; now.Before(t0.Add(time.Minute)); now = now.Add(10 * time.Millisecond) {
		e.Advance(now)
		checkInvariants(t, e)
	}
	st := e.Peek()
	if st.Preemptions == 0 {
		t.Errorf("no preemption, want the newest request preempted when the cache overflows")
	}
	if st.Completed != 3 || st.KVCacheUsedTokens != 0 || st.GenerationTokens != 3000 {
		t.Errorf("stats %+v, want 3 completed, 3000 generated tokens, an empty cache", st)
	}
	if st.PromptTokens <= 9003 {
		t.Errorf("%d prompt tokens prefilled, want more than 9003: preempted requests recompute", st.PromptTokens)
	}
	if firstTokens != 3 {
		t.Errorf("TTFT observed %d times, want once per request", firstTokens)
	}
	// The oldest request is never preempted, so it finishes first.
	if len(finished) == 0 || finished[0] != 3000 {
		t.Errorf("finish order by context %v, want the oldest (3000) first", finished)
	}
}

func TestBusyFraction(t *testing.T) {
	for _, tc := range []struct {
		rate     float64
		min, max float64
	}{
		{rate: 0, min: 0, max: 0},
		{rate: 50, min: 0.999, max: 1},
	} {
		s := newSim(t, DefaultProfile(), tc.rate, 3)
		s.run(5 * time.Second)
		s.e.Stats() // start a window after warm-up
		s.run(20 * time.Second)
		if peek := s.e.Peek().BusyFraction; peek < tc.min || peek > tc.max {
			t.Errorf("rate %v: peeked busy fraction %.4f, want in [%v, %v]", tc.rate, peek, tc.min, tc.max)
		}
		st := s.e.Stats()
		if st.BusyFraction < tc.min || st.BusyFraction > tc.max {
			t.Errorf("rate %v: busy fraction %.4f, want in [%v, %v]", tc.rate, st.BusyFraction, tc.min, tc.max)
		}
		if next := s.e.Stats(); next.BusyFraction != 0 || next.BusyTime != st.BusyTime {
			t.Errorf("rate %v: a second Stats at the same instant gives fraction %v and busy time %v, want 0 and %v",
				tc.rate, next.BusyFraction, next.BusyTime, st.BusyTime)
		}
	}
}

func TestSameSeedSameRun(t *testing.T) {
	run := func(seed uint64) (Stats, []time.Duration) {
		s := newSim(t, DefaultProfile(), 12, seed)
		s.run(time.Minute)
		if err := s.l.SetRate(s.now, 25); err != nil {
			t.Fatal(err)
		}
		s.run(30 * time.Second)
		return s.e.Stats(), s.ttfts
	}
	st1, ttft1 := run(42)
	st2, ttft2 := run(42)
	if st1 != st2 || !slices.Equal(ttft1, ttft2) {
		t.Errorf("same seed, different runs:\n%+v\n%+v", st1, st2)
	}
	if _, ttft3 := run(43); slices.Equal(ttft1, ttft3) {
		t.Errorf("seeds 42 and 43 gave identical TTFTs")
	}
}

func TestSubmitRejectsUnservableRequests(t *testing.T) {
	p := DefaultProfile()
	e, err := NewEngine(p, func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []Request{
		{ContextTokens: 0, GeneratedTokens: 1},
		{ContextTokens: 1, GeneratedTokens: 0},
		{ContextTokens: -5, GeneratedTokens: 10},
		{ContextTokens: p.KVCacheTokens, GeneratedTokens: 1},
	} {
		if err := e.Submit(r); !errors.Is(err, ErrInvalidRequest) {
			t.Errorf("Submit(%+v) = %v, want ErrInvalidRequest", r, err)
		}
	}
	if err := e.Submit(Request{ContextTokens: p.KVCacheTokens - 1, GeneratedTokens: 1}); err != nil {
		t.Errorf("a request filling the whole cache was rejected: %v", err)
	}
	if st := e.Peek(); st.Rejected != 4 || st.Submitted != 1 {
		t.Errorf("stats %+v, want 4 rejected and 1 submitted", st)
	}
}

func TestProfileValidate(t *testing.T) {
	if err := DefaultProfile().Validate(); err != nil {
		t.Fatalf("default profile: %v", err)
	}
	for name, mutate := range map[string]func(*Profile){
		"zero prefill":   func(p *Profile) { p.PrefillTokensPerSec = 0 },
		"zero base step": func(p *Profile) { p.DecodeBaseStep = 0 },
		"negative step":  func(p *Profile) { p.DecodePerSeqStep = -1 },
		"zero batch":     func(p *Profile) { p.MaxBatch = 0 },
		"tiny cache":     func(p *Profile) { p.KVCacheTokens = 1 },
	} {
		p := DefaultProfile()
		mutate(&p)
		if _, err := NewEngine(p, nil); err == nil {
			t.Errorf("%s: NewEngine accepted %+v", name, p)
		}
	}
}

// How often the engine is advanced must not change what it simulates:
// scrapes and the background loop call Advance at arbitrary instants.
func TestAdvanceGranularityDoesNotMatter(t *testing.T) {
	run := func(tick time.Duration) Stats {
		s := newSim(t, DefaultProfile(), 17, 8)
		for end := t0.Add(90 * time.Second); s.now.Before(end); {
			s.now = s.now.Add(tick)
			s.l.Drive(s.e, s.now)
		}
		return s.e.Peek()
	}
	fine, coarse := run(3*time.Millisecond), run(9*time.Second)
	if fine != coarse {
		t.Errorf("advancing every 3ms and every 9s differ:\n%+v\n%+v", fine, coarse)
	}
}
