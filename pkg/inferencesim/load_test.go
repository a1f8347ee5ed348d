package inferencesim

import (
	"math"
	"testing"
	"time"
)

func TestLoadRateValidation(t *testing.T) {
	l := NewLoad(1, nil)
	for _, rate := range []float64{-1, math.NaN(), math.Inf(1), MaxRate + 1} {
		if err := l.SetRate(t0, rate); err == nil {
			t.Errorf("SetRate(%v) succeeded", rate)
		}
	}
	for _, rate := range []float64{0, 0.001, 12.5, MaxRate} {
		if err := l.SetRate(t0, rate); err != nil || l.Rate() != rate {
			t.Errorf("SetRate(%v) = %v, rate now %v", rate, err, l.Rate())
		}
	}
}

func TestLoadArrivalsFollowRate(t *testing.T) {
	for _, rate := range []float64{0, 2, 40} {
		e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
		if err != nil {
			t.Fatal(err)
		}
		l := NewLoad(5, nil)
		if err := l.SetRate(t0, rate); err != nil {
			t.Fatal(err)
		}
		const d = 10 * time.Minute
		l.Drive(e, t0.Add(d))
		got := float64(e.Peek().Submitted)
		want := rate * d.Seconds()
		// Poisson: the count's standard deviation is sqrt(want); allow 4.
		if math.Abs(got-want) > 4*math.Sqrt(want) {
			t.Errorf("rate %v: %v arrivals in %v, want about %v", rate, got, d, want)
		}
	}
}

func TestLoadRateChangeTakesEffectAtOnce(t *testing.T) {
	e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	l := NewLoad(9, nil)
	if err := l.SetRate(t0, 1000); err != nil {
		t.Fatal(err)
	}
	l.Drive(e, t0.Add(time.Second))
	if err := l.SetRate(t0.Add(time.Second), 0); err != nil {
		t.Fatal(err)
	}
	before := e.Peek().Submitted
	l.Drive(e, t0.Add(time.Hour))
	if after := e.Peek().Submitted; after != before || before < 900 {
		t.Errorf("%d arrivals in the first second at 1000/s, %d after stopping; want about 1000 and no more", before, after)
	}
}

func TestEmpiricalSizes(t *testing.T) {
	sizes := EmpiricalSizes{{ContextTokens: 10, GeneratedTokens: 1}, {ContextTokens: 5000, GeneratedTokens: 300}}
	if err := validateSizes(sizes, DefaultProfile()); err != nil {
		t.Fatal(err)
	}
	e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	var seen = map[Request]int{}
	e.SetHooks(Hooks{Finished: func(c Completion) { seen[c.Request]++ }})
	l := NewLoad(3, sizes)
	if err := l.SetRate(t0, 2); err != nil {
		t.Fatal(err)
	}
	l.Drive(e, t0.Add(5*time.Minute))
	if len(seen) != 2 || seen[sizes[0]] < 200 || seen[sizes[1]] < 200 {
		t.Errorf("finished sizes %v, want both sizes about 300 times", seen)
	}
	for _, bad := range []Sizes{EmpiricalSizes{}, EmpiricalSizes{{ContextTokens: 0, GeneratedTokens: 1}}, nil} {
		if err := validateSizes(bad, DefaultProfile()); err == nil {
			t.Errorf("validateSizes(%v) succeeded", bad)
		}
	}
}
