package scrape

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"
	clocktesting "k8s.io/utils/clock/testing"
)

// hangGuard bounds how long a test waits for something that, when the code
// is right, happens at once; it is a deadlock detector, not a timing check.
const hangGuard = 30 * time.Second

func targets(base string, n int, prefix string) []Target {
	ts := make([]Target, n)
	for i := range ts {
		key := fmt.Sprintf("%s%d", prefix, i)
		ts[i] = Target{Key: key, URL: base + "/" + key}
	}
	return ts
}

// collect returns a sink that sends results on a channel large enough that
// the sink never blocks.
func collect(n int) (func(Result), chan Result) {
	ch := make(chan Result, n)
	return func(r Result) {
		// The families are the worker's until sink returns: keep a copy.
		if r.Families != nil {
			kept := make(map[string]*dto.MetricFamily, len(r.Families))
			for k, mf := range r.Families {
				kept[k] = proto.Clone(mf).(*dto.MetricFamily)
			}
			r.Families = kept
		}
		ch <- r
	}, ch
}

func receive(t *testing.T, ch <-chan Result, what string) Result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(hangGuard):
		t.Fatalf("no result while waiting for %s", what)
		return Result{}
	}
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(hangGuard):
		t.Fatalf("%s did not happen", what)
	}
}

// checkOncePerTarget asserts that results hold exactly one result per target.
func checkOncePerTarget(t *testing.T, ts []Target, results []Result) {
	t.Helper()
	seen := make(map[string]int)
	for _, r := range results {
		seen[r.Target.Key]++
	}
	for _, tg := range ts {
		if seen[tg.Key] != 1 {
			t.Errorf("target %s reported %d times", tg.Key, seen[tg.Key])
		}
	}
	if len(results) != len(ts) {
		t.Errorf("got %d results for %d targets", len(results), len(ts))
	}
}

// TestCycleSlowTargetsDoNotDelayOthers holds 5 of 50 targets until every
// other result has been delivered: the fast results can only arrive if no
// worker waits on a slow target, and all 5 slow ones must be in flight
// together, so a cycle costs one slow scrape, not five.
func TestCycleSlowTargetsDoNotDelayOthers(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan string, 5)
	body := readTestdata(t, "vllm.prom")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow") {
			arrived <- r.URL.Path
			select {
			case <-release:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", ctText)
		_, _ = w.Write(body)
	}))
	t.Cleanup(srv.Close)

	ts := append(targets(srv.URL, 45, "fast"), targets(srv.URL, 5, "slow")...)
	// Interleave so that slow targets are claimed early, among fast ones.
	for i := range 5 {
		ts[i*9], ts[45+i] = ts[45+i], ts[i*9]
	}
	sink, ch := collect(len(ts))
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(Config{Workers: 10, Timeout: time.Minute}).Cycle(t.Context(), ts, sink)
	}()

	var results []Result
	for range 45 {
		r := receive(t, ch, "fast targets while slow ones hang")
		if !strings.HasPrefix(r.Target.Key, "fast") || r.Err != nil || len(r.Families) == 0 {
			t.Fatalf("result before release: %s err=%v families=%d", r.Target.Key, r.Err, len(r.Families))
		}
		results = append(results, r)
	}
	for range 5 {
		select {
		case <-arrived:
		case <-time.After(hangGuard):
			t.Fatal("slow targets were not all in flight together")
		}
	}
	close(release)
	waitDone(t, done, "Cycle returning after release")
	close(ch)
	for r := range ch {
		if r.Err != nil {
			t.Errorf("%s: %v", r.Target.Key, r.Err)
		}
		results = append(results, r)
	}
	checkOncePerTarget(t, ts, results)
}

func TestCycleTimeoutOnlyHitsSlowTargets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/slow") {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	ts := append(targets(srv.URL, 10, "fast"), targets(srv.URL, 3, "slow")...)
	sink, ch := collect(len(ts))
	// Long enough that no fast target times out on a loaded machine.
	New(Config{Timeout: time.Second}).Cycle(t.Context(), ts, sink)
	close(ch)
	var results []Result
	for r := range ch {
		want := ""
		if strings.HasPrefix(r.Target.Key, "slow") {
			want = ReasonTimeout
		}
		if got := Reason(r.Err); got != want {
			t.Errorf("%s: reason %q, want %q (err: %v)", r.Target.Key, got, want, r.Err)
		}
		if r.Time.IsZero() || r.Duration <= 0 {
			t.Errorf("%s: time %v duration %v", r.Target.Key, r.Time, r.Duration)
		}
		results = append(results, r)
	}
	checkOncePerTarget(t, ts, results)
}

func TestCycleCancel(t *testing.T) {
	const workers = 4
	arrived := make(chan struct{}, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-r.Context().Done()
	}))
	t.Cleanup(srv.Close)
	ts := targets(srv.URL, 20, "t")
	sink, ch := collect(len(ts))
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		New(Config{Workers: workers, Timeout: time.Hour}).Cycle(ctx, ts, sink)
	}()
	for range workers {
		select {
		case <-arrived:
		case <-time.After(hangGuard):
			t.Fatal("workers did not start")
		}
	}
	cancel()
	waitDone(t, done, "Cycle returning after cancel")
	close(ch)
	var results []Result
	for r := range ch {
		if got := Reason(r.Err); got != ReasonCanceled {
			t.Errorf("%s: reason %q, want canceled (err: %v)", r.Target.Key, got, r.Err)
		}
		results = append(results, r)
	}
	checkOncePerTarget(t, ts, results)
}

func TestCycleConcurrencyBound(t *testing.T) {
	const workers = 4
	var (
		inFlight, maxInFlight atomic.Int64
		fullOnce              sync.Once
		full                  = make(chan struct{})
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for m := maxInFlight.Load(); n > m && !maxInFlight.CompareAndSwap(m, n); m = maxInFlight.Load() {
		}
		// Hold every request until Workers are in flight at once, and a
		// little longer, so that an unbounded scraper piles up beyond
		// the bound. A bounded one passes however long this takes.
		if n >= workers {
			fullOnce.Do(func() { time.AfterFunc(20*time.Millisecond, func() { close(full) }) })
		}
		select {
		case <-full:
		case <-r.Context().Done():
		}
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	ts := targets(srv.URL, 40, "t")
	var calls atomic.Int64
	New(Config{Workers: workers, Timeout: time.Minute}).Cycle(t.Context(), ts, func(r Result) {
		calls.Add(1)
		if r.Err != nil {
			t.Errorf("%s: %v", r.Target.Key, r.Err)
		}
	})
	if got := maxInFlight.Load(); got != workers {
		t.Errorf("max in flight = %d, want %d", got, workers)
	}
	if calls.Load() != int64(len(ts)) {
		t.Errorf("sink called %d times for %d targets", calls.Load(), len(ts))
	}
}

func TestCycleNoTargets(t *testing.T) {
	New(Config{}).Cycle(t.Context(), nil, func(Result) { t.Error("sink called") })
}

// TestCycleLeavesNoGoroutines runs a cycle of every kind of failure and
// checks that, once idle connections are closed, nothing is left running on
// either side: a response body left open would keep its connection's
// goroutines, and the server's handler, alive.
func TestCycleLeavesNoGoroutines(t *testing.T) {
	chunk := []byte(strings.Repeat("m 1\n", 4096))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			<-r.Context().Done()
		case "/huge":
			for {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/error":
			http.Error(w, "no", http.StatusInternalServerError)
		default:
			_, _ = w.Write([]byte("up 1\n"))
		}
	}))
	t.Cleanup(srv.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	before := runtime.NumGoroutine()
	ts := []Target{
		{Key: "ok", URL: srv.URL + "/ok"}, {Key: "slow", URL: srv.URL + "/slow"},
		{Key: "huge", URL: srv.URL + "/huge"}, {Key: "error", URL: srv.URL + "/error"},
		{Key: "closed", URL: closed.URL}, {Key: "bad url", URL: "http://[::1"},
	}
	// The timeout must outlast parsing the capped body on a loaded machine.
	s := New(Config{Timeout: time.Second, MaxBytes: 16 << 10})
	reasons := make(map[string]string)
	var mu sync.Mutex
	s.Cycle(t.Context(), ts, func(r Result) {
		mu.Lock()
		defer mu.Unlock()
		reasons[r.Target.Key] = Reason(r.Err)
	})
	want := map[string]string{
		"ok": "", "slow": ReasonTimeout, "huge": ReasonTooLarge, "error": ReasonHTTPStatus,
		"closed": ReasonConnect, "bad url": ReasonOther,
	}
	for k, w := range want {
		if reasons[k] != w {
			t.Errorf("%s: reason %q, want %q", k, reasons[k], w)
		}
	}
	s.CloseIdleConnections()
	deadline := time.Now().Add(hangGuard)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCycleSilentTargetsDoNotStarveHealthyOnes scrapes 256 targets that
// accept a connection and never answer, listed before 16 healthy ones, cycle
// after cycle, keeping each target's health as the gatherer does. From the
// second cycle on, when the silent ones are known to fail, every healthy
// target must be scraped without error, started within one per-target
// timeout of the cycle's start (before any silent scrape can have freed a
// worker), and no cycle may outlast its deadline.
func TestCycleSilentTargetsDoNotStarveHealthyOnes(t *testing.T) {
	const (
		timeout = 200 * time.Millisecond
		// Long enough for the first cycle to try every target once
		// (272 targets, 64 workers: five rounds of one timeout, the
		// healthy ones last), with room for a loaded machine.
		cycleTimeout = 1500 * time.Millisecond
		// Room for a cycle's goroutines to see its end; not a timing
		// allowance for the scrapes themselves.
		slack = 150 * time.Millisecond
	)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c) // held open, never answered
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(healthy.Close)
	ts := append(targets("http://"+ln.Addr().String(), 256, "silent"), targets(healthy.URL, 16, "healthy")...)

	s := New(Config{Timeout: timeout, CycleTimeout: cycleTimeout, MaxIdleConns: 16})
	var rmu sync.Mutex
	for cycle := range 3 {
		start := time.Now()
		var results []Result
		s.Cycle(t.Context(), ts, func(r Result) {
			rmu.Lock()
			results = append(results, r)
			rmu.Unlock()
		})
		if d := time.Since(start); d > cycleTimeout+slack {
			t.Errorf("cycle %d took %v, deadline %v", cycle, d, cycleTimeout)
		}
		checkOncePerTarget(t, ts, results)
		health := make(map[string]Health, len(results))
		abandoned := 0
		for _, r := range results {
			switch reason := Reason(r.Err); {
			case reason == "":
				health[r.Target.Key] = HealthUp
			case reason == ReasonCycleDeadline:
				abandoned++
				health[r.Target.Key] = r.Target.Health // not tried: nothing learnt
			default:
				health[r.Target.Key] = HealthDown
			}
			if !strings.HasPrefix(r.Target.Key, "healthy") {
				continue
			}
			if r.Err != nil {
				t.Errorf("cycle %d: %s: %v", cycle, r.Target.Key, r.Err)
			} else if began := r.Time.Sub(start); cycle > 0 && began >= timeout {
				// Queued behind the silent targets, a healthy one
				// would start only once a silent scrape timed out and
				// freed its worker. Its end is not checked: a machine
				// that stalls the process for a timeout (race builds
				// of every package at once on 2 cores did, once) ends
				// every scrape in flight at the same moment.
				t.Errorf("cycle %d: %s started %v after the cycle's start (took %v)", cycle, r.Target.Key, began, r.Duration)
			}
		}
		if cycle > 0 && abandoned == 0 {
			t.Errorf("cycle %d: no silent target was left to the deadline; the test proves nothing", cycle)
		}
		for i := range ts {
			ts[i].Health = health[ts[i].Key]
		}
	}
}

// TestCycleTargetTimeout: a target's own Timeout, when shorter, is its
// deadline: a hanging target with one ends as a timeout, long before the
// cycle's deadline, which it would otherwise have held its worker until.
func TestCycleTargetTimeout(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	s := New(Config{Timeout: time.Minute, CycleTimeout: 20 * time.Second})
	ts := targets(srv.URL, 1, "t")
	ts[0].Timeout = 100 * time.Millisecond
	sink, ch := collect(len(ts))
	s.Cycle(context.Background(), ts, sink)
	if r := receive(t, ch, "the scrape"); Reason(r.Err) != ReasonTimeout {
		t.Errorf("a target with a 100 ms timeout ended with %v, want a timeout", r.Err)
	}
}

// TestCycleReusesParseMemory: a worker parses each scrape into the memory
// of its last one, and every sink still sees its own target's values,
// labels and histogram.
func TestCycleReusesParseMemory(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		fmt.Sscanf(r.URL.Path, "/pods/%d", &i)
		w.Header().Set("Content-Type", ctText)
		fmt.Fprintf(w, "# TYPE q gauge\nq{model_name=\"m%d\"} %d\n# TYPE h histogram\n", i, i)
		for b := range i%5 + 1 {
			fmt.Fprintf(w, "h_bucket{le=\"%d\"} %d\n", b, i+b)
		}
		fmt.Fprintf(w, "h_bucket{le=\"+Inf\"} %d\nh_count %d\nh_sum 1\n", i+10, i+10)
	}))
	t.Cleanup(srv.Close)
	ts := make([]Target, 200)
	for i := range ts {
		ts[i] = Target{Key: fmt.Sprint(i), URL: fmt.Sprintf("%s/pods/%d", srv.URL, i)}
	}
	var bad atomic.Int32
	var mu sync.Mutex
	var errs []string
	New(Config{Workers: 2}).Cycle(t.Context(), ts, func(r Result) {
		var i int
		fmt.Sscan(r.Target.Key, &i)
		q, h := r.Families["q"], r.Families["h"]
		ok := r.Err == nil && q != nil && h != nil && len(q.Metric) == 1 && len(h.Metric) == 1 &&
			q.Metric[0].GetGauge().GetValue() == float64(i) && q.Metric[0].GetLabel()[0].GetValue() == fmt.Sprintf("m%d", i) &&
			len(h.Metric[0].GetHistogram().GetBucket()) == i%5+2 && h.Metric[0].GetHistogram().GetSampleCount() == uint64(i+10) &&
			h.Metric[0].GetHistogram().GetBucket()[0].GetCumulativeCount() == uint64(i)
		if !ok {
			bad.Add(1)
			mu.Lock()
			errs = append(errs, fmt.Sprintf("target %d: err %v, families %v", i, r.Err, r.Families))
			mu.Unlock()
		}
	})
	if n := bad.Load(); n > 0 {
		t.Errorf("%d of %d targets read wrong; first: %s", n, len(ts), errs[0])
	}
}

// TestCycleStampsResultsByItsClock: a result's Time and Duration come from
// Config.Clock, so that a caller on a fake clock stores samples at its
// times and never waits in real time for them to differ.
func TestCycleStampsResultsByItsClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("up 1\n"))
	}))
	defer srv.Close()
	s := New(Config{Clock: clk})
	for _, step := range []time.Duration{0, time.Second, time.Hour} {
		clk.Step(step)
		sink, ch := collect(1)
		s.Cycle(context.Background(), targets(srv.URL, 1, "t"), sink)
		r := receive(t, ch, "the result")
		if r.Err != nil || !r.Time.Equal(clk.Now()) || r.Duration != 0 {
			t.Errorf("after a step of %v: Time %v, Duration %v, Err %v; want %v, 0, nil", step, r.Time, r.Duration, r.Err, clk.Now())
		}
	}
}

// TestCycleUnknownTargetsBesideAFullHealthyLane: when the healthy lane
// alone fills the cycle (healthy targets that hang until its deadline),
// unknown targets (new pods, retried ones) are still scraped, a few
// workers at a time beside it; before, they waited for the healthy lane
// to empty, and a pod that failed once under load was never retried.
func TestCycleUnknownTargetsBesideAFullHealthyLane(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/hang") {
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte("up 1\n"))
	}))
	t.Cleanup(srv.Close)
	hang := targets(srv.URL, 20, "hang")
	for i := range hang {
		hang[i].Health = HealthUp
	}
	ts := append(hang, targets(srv.URL, 3, "new")...)
	s := New(Config{Timeout: 10 * time.Second, CycleTimeout: 300 * time.Millisecond, Workers: 4, SuspectWorkers: 1})
	var (
		mu      sync.Mutex
		results []Result
	)
	s.Cycle(t.Context(), ts, func(r Result) {
		mu.Lock()
		results = append(results, r)
		mu.Unlock()
	})
	checkOncePerTarget(t, ts, results)
	untried := 0
	for _, r := range results {
		switch {
		case strings.HasPrefix(r.Target.Key, "new") && r.Err != nil:
			t.Errorf("%s: %v, want scraped beside the healthy lane", r.Target.Key, r.Err)
		case strings.HasPrefix(r.Target.Key, "hang") && Reason(r.Err) == ReasonCycleDeadline && r.Duration < 100*time.Millisecond:
			untried++
		}
	}
	if untried == 0 {
		t.Error("every healthy target was started: the healthy lane did not fill the cycle, and the test proves nothing")
	}
}
