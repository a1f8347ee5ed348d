// Package gather runs the adapter's embedded collection: every interval it
// discovers targets from the pod informer, scrapes them concurrently and
// stores what they said. One broken target costs only its own samples.
package gather

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/clock"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// PodLister lists the pods the informer holds.
type PodLister interface {
	List(selector labels.Selector) ([]*corev1.Pod, error)
}

// Scraper scrapes a set of targets; pkg/adapter/scrape implements it.
type Scraper interface {
	Cycle(ctx context.Context, targets []scrape.Target, sink func(scrape.Result))
}

// Config wires a Gatherer.
type Config struct {
	Pods      PodLister
	Discovery discovery.Config
	Scraper   Scraper
	Store     *store.Store
	Interval  time.Duration
	// RetainFor is how long an object with no new sample is kept before
	// its memory is released.
	RetainFor  time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
	// ExporterToken, when set, returns the token sent to the exporters
	// alone, as a bearer token: their reserved lane, which a flood of
	// other clients cannot fill (the exporter's --web.reserved-token-file).
	// It is asked once a cycle; while it returns none, none is sent.
	ExporterToken func() []byte
	// Clock times cycles and forgets stale objects by; give the Scraper
	// the same one, which stamps the samples. Default the real one.
	Clock clock.PassiveClock
}

// Gatherer is the scrape loop.
type Gatherer struct {
	cfg Config
	log *slog.Logger
	m   *gatherMetrics
	now func() time.Time

	mu    sync.Mutex
	known map[string]*target // by target key, to forget vanished ones
	// problems are the discovery problems of the previous cycle, so that
	// each is logged when it appears and when it is fixed, not every cycle.
	problems map[string]bool
	// placed is where the pods of the current cycle run (trust.go).
	placed atomic.Pointer[placement]
	// lastStart is when the previous cycle started: a target with no
	// success since was left out of it (order). Cycles never overlap.
	lastStart time.Time
}

// New returns a Gatherer. Its metrics are registered on cfg.Registerer.
func New(cfg Config) (*Gatherer, error) {
	if cfg.Pods == nil || cfg.Scraper == nil || cfg.Store == nil {
		return nil, errors.New("gather: pods, scraper and store are required")
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("gather: interval must be positive, got %v", cfg.Interval)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	g := &Gatherer{cfg: cfg, log: cfg.Logger, m: newGatherMetrics(), now: cfg.Clock.Now, known: map[string]*target{}}
	if cfg.Registerer != nil {
		if err := g.m.register(cfg.Registerer, targetCollector{g}, trustCollector{g}); err != nil {
			return nil, fmt.Errorf("gather: register metrics: %w", err)
		}
	}
	return g, nil
}

// target is a discovered target and when it last answered.
type target struct {
	discovery.Target
	// lastSuccess is when its last successful scrape started, in Unix
	// nanoseconds; 0 until one has.
	lastSuccess atomic.Int64
	// failures counts its failed scrapes by failReasons.
	failures [len(failReasons)]atomic.Uint64
	// health is its scrape.Health after its last scrape, which the
	// scraper schedules by: failing targets go last, few at a time.
	health atomic.Uint32
	// typical is how long its successful scrapes take, in nanoseconds: the
	// slowest recent one, decaying; failed counts its failures since its
	// last success (health.go).
	typical atomic.Int64
	failed  atomic.Uint32
	// answers counts its successful scrapes, up to maxAnswers.
	answers atomic.Uint32
	// refused counts the pods an exporter may not speak for, by trustReasons.
	refused [len(trustReasons)]atomic.Uint64
	// rejected counts the values ingest rejected from its otherwise
	// good scrapes, by ingest.RejectReasons.
	rejected [len(ingest.RejectReasons)]atomic.Uint64
}

// Run scrapes every interval until ctx is done. Cycles never overlap: a
// slow cycle delays the next one instead of piling up.
func (g *Gatherer) Run(ctx context.Context) {
	t := time.NewTicker(g.cfg.Interval)
	defer t.Stop()
	for {
		g.Cycle(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readFamilies are what ingest reads of each kind of target: the scraper
// parses only those, which at thousands of inference servers, each with
// dozens of histograms nobody here reads, is most of the scraping work.
var readFamilies = map[discovery.Kind]*scrape.Families{
	discovery.KindExporter:  scrape.NewFamilies(ingest.GPUFamilies(), nil),
	discovery.KindInference: inferenceFamilies[store.AllHistograms],
}

// inferenceFamilies are the inference targets' families by the histograms
// their namespace's readers read (store.HistogramsRead): a TTFT, ITL or
// prefill-time histogram nobody there reads is not parsed.
var inferenceFamilies = func() (out [store.AllHistograms + 1]*scrape.Families) {
	for h := range out {
		out[h] = scrape.NewFamilies(inferenceAndRouterFamilies(store.Histograms(h)))
	}
	return out
}()

// inferenceAndRouterFamilies are the families of every inference server
// and router dialect, with the histograms of read alone: an annotated pod
// is either, told by what it serves.
func inferenceAndRouterFamilies(read store.Histograms) (names, prefixes []string) {
	var skip []dialect.Signal
	for _, h := range []struct {
		read store.Histograms
		sig  dialect.Signal
	}{{store.HistogramsTTFT, dialect.TTFT}, {store.HistogramsITL, dialect.ITL}, {store.HistogramsPrefill, dialect.Prefill}} {
		if !read.Has(h.read) {
			skip = append(skip, h.sig)
		}
	}
	names, prefixes = inference.FamiliesWithout(skip...)
	rn, rp := inference.RouterFamilies()
	return append(names, rn...), append(prefixes, rp...)
}

// families returns what the scraper parses of t, with each namespace's
// histograms read looked up once in read.
func (g *Gatherer) families(t discovery.Target, now time.Time, read map[string]store.Histograms) *scrape.Families {
	if t.Kind != discovery.KindInference {
		return readFamilies[t.Kind]
	}
	h, ok := read[t.Namespace]
	if !ok {
		h = g.cfg.Store.HistogramsRead(t.Namespace, now)
		read[t.Namespace] = h
	}
	return inferenceFamilies[h]
}

// Cycle runs one discovery and scrape round.
func (g *Gatherer) Cycle(ctx context.Context) {
	start := g.now()
	pods, err := g.cfg.Pods.List(labels.Everything())
	if err != nil {
		g.log.Error("listing pods from the informer failed", "err", err)
		return
	}
	targets, problems := discovery.Targets(pods, g.cfg.Discovery)
	g.reportProblems(problems)
	g.placed.Store(newPlacement(pods, targets))
	byKey := g.track(targets)

	var exporterAuth string
	if g.cfg.ExporterToken != nil {
		if tok := g.cfg.ExporterToken(); len(tok) > 0 {
			exporterAuth = "Bearer " + string(tok)
		}
	}
	st := make([]scrape.Target, len(targets))
	read := map[string]store.Histograms{}
	for i, t := range targets {
		tt := byKey[t.Key()]
		st[i] = scrape.Target{Key: t.Key(), URL: t.URL, Families: g.families(t, start, read),
			Health: tt.lane(), Timeout: g.patience(tt)}
		if t.Kind == discovery.KindExporter {
			st[i].Authorization = exporterAuth
		}
	}
	g.order(st, byKey, g.lastStart)
	g.lastStart = start
	g.cfg.Scraper.Cycle(ctx, st, func(r scrape.Result) {
		if t, ok := byKey[r.Target.Key]; ok {
			g.ingest(t, r)
		}
	})
	if g.cfg.RetainFor > 0 {
		g.cfg.Store.Forget(g.now(), g.cfg.RetainFor)
	}
	g.m.cycle.Observe(g.now().Sub(start).Seconds())
}

// reportProblems logs each misconfigured pod once, when its problem
// appears, and again when it is gone; the gauge shows how many remain.
func (g *Gatherer) reportProblems(problems []error) {
	current := make(map[string]bool, len(problems))
	for _, p := range problems {
		msg := p.Error()
		current[msg] = true
		if !g.problems[msg] {
			g.log.Warn("pod asks to be scraped but cannot be", "err", p)
		}
	}
	for msg := range g.problems {
		if !current[msg] {
			g.log.Info("scrape problem resolved", "was", msg)
		}
	}
	g.problems = current
	g.m.misconfigured.Set(float64(len(problems)))
}

// track remembers the current targets and drops the per-target series of
// those that vanished, so the adapter's own metrics do not grow forever.
func (g *Gatherer) track(targets []discovery.Target) map[string]*target {
	byKey := make(map[string]*target, len(targets))
	counts := map[discovery.Kind]int{}
	g.mu.Lock()
	for _, t := range targets {
		k := t.Key()
		tt, ok := g.known[k]
		if !ok {
			tt = &target{}
		}
		tt.Target = t
		byKey[k] = tt
		counts[t.Kind]++
	}
	g.known = byKey
	g.mu.Unlock()
	for _, k := range []discovery.Kind{discovery.KindExporter, discovery.KindInference} {
		g.m.targets.WithLabelValues(k.String()).Set(float64(counts[k]))
	}
	return byKey
}

// ingest stores one scrape's samples. It runs on the scraper's workers.
func (g *Gatherer) ingest(tt *target, r scrape.Result) {
	t := tt.Target
	g.m.duration.WithLabelValues(t.Kind.String()).Observe(r.Duration.Seconds())
	if r.Err != nil {
		g.fail(tt, r, scrape.Reason(r.Err), r.Err)
		return
	}
	switch t.Kind {
	case discovery.KindExporter:
		pods, node, rejected, err := ingest.GPU(r.Families)
		if err != nil {
			g.fail(tt, r, ingest.Reason(err), err)
			return
		}
		g.reject(tt, rejected)
		g.admitGPU(tt, r.Families, pods)
		for k, s := range pods {
			s.Time = r.Time
			g.cfg.Store.PutPod(k, signal.SourceGPU, s)
		}
		if t.Node != "" {
			node.Time = r.Time
			g.cfg.Store.PutNode(t.Node, node)
		}
	case discovery.KindInference:
		if inference.IsRouter(r.Families) {
			if !g.ingestRouter(tt, r) {
				return
			}
			break
		}
		s, dialect, rejected, err := ingest.Inference(r.Families)
		if err != nil {
			g.fail(tt, r, ingest.Reason(err), err)
			return
		}
		g.reject(tt, rejected)
		s.Time = r.Time
		g.cfg.Store.PutPod(store.Key{Namespace: t.Namespace, Name: t.Pod}, signal.SourceInference, s)
		g.m.dialects.WithLabelValues(string(dialect)).Inc()
	}
	tt.lastSuccess.Store(r.Time.UnixNano())
	tt.answered(r.Duration)
	tt.health.Store(uint32(scrape.HealthUp))
}

// ingestRouter stores a router's held requests; false when the scrape
// failed.
func (g *Gatherer) ingestRouter(tt *target, r scrape.Result) bool {
	t := tt.Target
	s, dialect, rejected, err := ingest.Router(r.Families)
	if err != nil {
		g.fail(tt, r, ingest.Reason(err), err)
		return false
	}
	g.reject(tt, rejected)
	s.Time = r.Time
	if err := g.cfg.Store.PutRouter(store.Key{Namespace: t.Namespace, Name: t.Pod}, s); err != nil {
		g.fail(tt, r, ingest.ReasonTooManyModels, err)
		return false
	}
	g.m.dialects.WithLabelValues(string(dialect)).Inc()
	return true
}

func (g *Gatherer) fail(tt *target, r scrape.Result, reason string, err error) {
	t := tt.Target
	tt.failures[failReason(reason)].Add(1)
	switch {
	case reason == scrape.ReasonCanceled,
		reason == scrape.ReasonCycleDeadline && !g.heldAWorker(r):
		// Not tried, or cut as it started: nothing learnt about the
		// target.
	default:
		// A target in flight when the cycle ended held a worker all
		// that time: as suspect as one that timed out.
		tt.failed.Add(1)
		tt.health.Store(uint32(scrape.HealthDown))
	}
	g.log.Debug("scrape failed", "target", t.Key(), "kind", t.Kind.String(), "url", t.URL, "reason", reason, "err", err)
}

// reject counts the values ingest rejected from a scrape it stored.
func (g *Gatherer) reject(tt *target, rejected []ingest.Rejection) {
	for _, r := range rejected {
		tt.rejected[rejectReason(r.Reason)].Add(1)
	}
	if len(rejected) > 0 {
		t := tt.Target
		g.log.Debug("values rejected", "target", t.Key(), "kind", t.Kind.String(), "url", t.URL, "count", len(rejected), "first", rejected[0].Error())
	}
}
