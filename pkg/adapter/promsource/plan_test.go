package promsource

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// clock is a settable Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// fleet is a namespace of n pods named p0..p(n-1), all Ready.
func fleet(n int) []*corev1.Pod {
	out := make([]*corev1.Pod, n)
	for i := range out {
		out[i] = pod("ml", fmt.Sprintf("p%d", i), true)
	}
	return out
}

// answerAll replies to any query with a value for every pod of the
// namespace, value = the pod's index, plus a pod of another namespace.
func answerAll(n int) func(string) (int, string) {
	ss := make([]series, 0, n+1)
	for i := range n {
		ss = append(ss, series{podLabels(fmt.Sprintf("p%d", i)), fmt.Sprint(i)})
	}
	ss = append(ss, series{map[string]string{"namespace": "other", "pod": "p1"}, "-1"})
	body := vector(t0, ss...)
	return func(string) (int, string) { return 200, body }
}

func isWide(q string) bool { return strings.Contains(q, `pod=~".*"`) }

// TestWideOrByName: a request asks the whole namespace when its pods are
// most of it, and names them when they are few; either way it serves the
// asked pods only, with their own values.
func TestWideOrByName(t *testing.T) {
	const size = 1000
	pods := fleet(size)
	cases := []struct {
		name  string
		asked []*corev1.Pod
		// podsIn is what the namespace counter says; 0: unknown.
		podsIn   int
		wantWide bool
	}{
		{"all of a namespace", pods, size, true},
		{"most of a namespace", pods[:800], size, true},
		{"a tenth of a namespace", pods[:100], size, false},
		{"one pod", pods[7:8], size, false},
		{"all of it, namespace size unknown", pods, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFakeProm(t)
			f.setReply(answerAll(size))
			s, err := New(Config{URL: f.URL, Timeout: time.Second, MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute,
				Now: func() time.Time { return t0 }, PodsIn: func(ns string) int {
					if ns != "ml" {
						t.Errorf("PodsIn(%q)", ns)
					}
					return c.podsIn
				}})
			if err != nil {
				t.Fatal(err)
			}
			vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", c.asked), metric(t, provider.QueueDepth), nil)
			if err != nil {
				t.Fatal(err)
			}
			reqs := f.take()
			wide := 0
			for _, r := range reqs {
				if isWide(r.query) {
					wide++
				}
			}
			if c.wantWide && (len(reqs) != 1 || wide != 1) {
				t.Errorf("%d queries, %d wide; want one wide query", len(reqs), wide)
			}
			if !c.wantWide && wide != 0 {
				t.Errorf("%d wide queries of %d, want the pods by name", wide, len(reqs))
			}
			for i, v := range vals {
				var want int
				fmt.Sscanf(c.asked[i].Name, "p%d", &want)
				if !v.Valid() || v.V != float64(want) {
					t.Errorf("%s = %+v, want %d", c.asked[i].Name, v, want)
				}
			}
		})
	}
}

// TestPlannerFollowsMeasuredCosts: the choice follows what reads cost, not
// a fixed share of the namespace. A server that answers reads by name
// cheaply (per name no dearer than per series) gets even a whole namespace
// by name once measured; one whose reads by name are dear gets a wide read
// for a tenth of it.
func TestPlannerFollowsMeasuredCosts(t *testing.T) {
	const size = 10_000
	cases := []struct {
		name                string
		perName, perSeries  time.Duration // measured per unit
		asked               int
		wantWide, priorWide bool
	}{
		{"priors, all pods", 0, 0, size, true, true},
		{"priors, a tenth", 0, 0, size / 10, false, false},
		{"cheap names, all pods", 5 * time.Microsecond, 15 * time.Microsecond, size, false, true},
		{"dear names, a tenth", 400 * time.Microsecond, 15 * time.Microsecond, size / 10, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			clk := &clock{t: t0}
			p := newPlanner(clk.now, 0, func(string) int { return size })
			const q = "wide"
			if got := p.wideRead("ml", "m", q, c.asked); got != c.priorWide {
				t.Fatalf("before measuring: wide = %v, want %v", got, c.priorWide)
			}
			if c.perName > 0 {
				// Several reads of each way, as the adapter's own reads
				// would feed it.
				for range 5 {
					p.byName("m", 1000, 1000*c.perName)
					p.wideDone("m", q, size, size*c.perSeries)
				}
			}
			if got := p.wideRead("ml", "m", q, c.asked); got != c.wantWide {
				t.Errorf("wide = %v, want %v", got, c.wantWide)
			}
		})
	}
}

// TestPlannerCountsDemand: many small reads of one namespace (an HPA per
// Deployment, each asking about its own pods) are each cheap by name, but
// together ask about most of the namespace within a reuse period, which
// one wide answer serves: the planner turns to it.
func TestPlannerCountsDemand(t *testing.T) {
	clk := &clock{t: t0}
	p := newPlanner(clk.now, 5*time.Second, func(string) int { return 1000 })
	first := p.wideRead("ml", "m", "wide", 1)
	if first {
		t.Fatal("a lone read of one pod of 1,000 went wide")
	}
	wide := 0
	for i := range 1000 {
		clk.add(5 * time.Millisecond) // 1,000 reads over 5 s
		if p.wideRead("ml", "m", "wide", 1) {
			wide++
			if i < 100 {
				t.Fatalf("read %d went wide: demand so far is a tenth of the namespace", i)
			}
		}
	}
	if wide < 500 {
		t.Errorf("%d of 1,000 reads wide, want most once the demand covers the namespace", wide)
	}
	// Without reuse a wide answer serves one read only.
	p = newPlanner(clk.now, 0, func(string) int { return 1000 })
	for range 1000 {
		if p.wideRead("ml", "m", "wide", 1) {
			t.Fatal("a read of one pod went wide without reuse")
		}
	}
}

// TestPlannerRevisits: when the two ways' predicted costs are close, the
// way not measured for a while is tried again, so estimates follow the
// server; when they are far apart, it is not.
func TestPlannerRevisits(t *testing.T) {
	clk := &clock{t: t0}
	p := newPlanner(clk.now, 0, func(string) int { return 1000 })
	// Measured: by name 20 us a name, wide 15 us a series.
	p.byName("m", 1000, 20*time.Millisecond)
	p.wideDone("m", "wide", 1000, 15*time.Millisecond)
	if !p.wideRead("ml", "m", "wide", 1000) {
		t.Fatal("all pods: want wide (15 ms against 20 ms)")
	}
	clk.add(revisit + time.Second)
	p.wideDone("m", "wide", 1000, 15*time.Millisecond) // wide measured lately, by name not
	if p.wideRead("ml", "m", "wide", 1000) {
		t.Error("a close call with by-name unmeasured for over 10 minutes: want it tried")
	}
	p.byName("m", 1000, 20*time.Millisecond)
	if !p.wideRead("ml", "m", "wide", 1000) {
		t.Error("by name measured again: want wide")
	}
	clk.add(revisit + time.Second)
	if p.wideRead("ml", "m", "wide", 10) {
		t.Error("ten pods of 1,000: not a close call, want by name")
	}
}

// TestReadsShared: identical queries in flight together are one query;
// an answer is reused within ReuseFor and not after; a failed query is
// not reused.
func TestReadsShared(t *testing.T) {
	f := newFakeProm(t)
	gate := make(chan struct{})
	var inflight atomic.Int32
	f.setReply(func(string) (int, string) {
		inflight.Add(1)
		<-gate
		return 200, vector(t0, series{podLabels("a"), "1"})
	})
	clk := &clock{t: t0}
	s, err := New(Config{URL: f.URL, Timeout: 5 * time.Second, MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute,
		Now: clk.now, ReuseFor: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pods := provider.NewPodSet("ml", []*corev1.Pod{pod("ml", "a", true)})
	read := func() error {
		vals, err := s.Pods(context.Background(), pods, metric(t, provider.QueueDepth), nil)
		if err == nil && (!vals[0].Valid() || vals[0].V != 1) {
			err = fmt.Errorf("value %+v, want 1", vals[0])
		}
		return err
	}
	const readers = 20
	errs := make(chan error, readers)
	for range readers {
		go func() { errs <- read() }()
	}
	for inflight.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(gate)
	for range readers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// Readers that arrive after the answer, within ReuseFor, reuse it.
	if n := len(f.take()); n != 1 {
		t.Fatalf("%d concurrent identical reads sent %d queries, want 1", readers, n)
	}
	clk.add(4 * time.Second)
	if err := read(); err != nil {
		t.Fatal(err)
	}
	if n := len(f.take()); n != 0 {
		t.Errorf("a read 4 s later sent %d queries, want the answer reused", n)
	}
	clk.add(2 * time.Second)
	if err := read(); err != nil {
		t.Fatal(err)
	}
	if n := len(f.take()); n != 1 {
		t.Errorf("a read 6 s later sent %d queries, want 1 (past reuse)", n)
	}
	f.setReply(func(string) (int, string) { return 503, `{"status":"error","errorType":"unavailable","error":"down"}` })
	clk.add(6 * time.Second)
	if err := read(); err == nil {
		t.Fatal("prometheus down: no error")
	}
	f.setReply(func(string) (int, string) { return 200, vector(t0, series{podLabels("a"), "1"}) })
	if err := read(); err != nil {
		t.Errorf("the read after a failure: %v, want a fresh query", err)
	}
	if n := len(f.take()); n != 2 {
		t.Errorf("%d queries for a failed read and the one after, want 2", n)
	}
}

// TestReadsForgetExpired: answers past reuse are dropped, so the shared
// reads hold no more than the queries of about two reuse periods.
func TestReadsForgetExpired(t *testing.T) {
	f := newFakeProm(t)
	f.setReply(answerAll(10))
	clk := &clock{t: t0}
	s, err := New(Config{URL: f.URL, Timeout: time.Second, TTFTWindow: time.Minute, Now: clk.now, ReuseFor: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	pods := fleet(100)
	for i := range 100 {
		clk.add(100 * time.Millisecond)
		if _, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods[i:i+1]), metric(t, provider.QueueDepth), nil); err != nil {
			t.Fatal(err)
		}
	}
	// 100 distinct queries over 10 s: those of the last two seconds at most.
	if n := s.reads.held(); n > 21 {
		t.Errorf("%d answers held after 10 s of distinct reads reused for 1 s, want at most 21", n)
	}
}

// TestSplitQueriesInParallel: the split queries of one request run
// together, never more than Config.Parallel at once.
func TestSplitQueriesInParallel(t *testing.T) {
	f := newFakeProm(t)
	var now, most atomic.Int32
	f.setReply(func(string) (int, string) {
		n := now.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		time.Sleep(20 * time.Millisecond)
		now.Add(-1)
		return 200, vector(t0)
	})
	s, err := New(Config{URL: f.URL, Timeout: 5 * time.Second, TTFTWindow: time.Minute, Parallel: 3, MaxQueryBytes: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pods(context.Background(), provider.NewPodSet("ml", fleet(2000)), metric(t, provider.QueueDepth), nil); err != nil {
		t.Fatal(err)
	}
	if n := len(f.take()); n < 10 {
		t.Fatalf("%d queries, want a split into many", n)
	}
	if m := most.Load(); m < 2 || m > 3 {
		t.Errorf("at most %d queries at once, want 2-3 (Parallel 3)", m)
	}
}
