package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// soakSample is what one look at the adapter found.
type soakSample struct {
	At      time.Duration // since the soak began
	RSSMiB  float64
	HeapMiB float64
	// Fresh counts the healthy pods with a successful scrape so far;
	// WorstStaleness is the age of the oldest newest sample among them.
	Fresh          int
	WorstStaleness time.Duration
	// Cycles is the scrape cycles so far, CycleSeconds their total time.
	Cycles       uint64
	CycleSeconds float64
	cycleBuckets []*dto.Bucket
	// HostileErrors sums the hostile pods' scrape errors by reason, and
	// HostileRejected the values rejected from their stored scrapes.
	HostileErrors, HostileRejected map[string]float64
	// CapacityHostile and CapacityHealthy are how long one read of a
	// model's capacity signal took, in a tenant namespace and the healthy
	// one.
	CapacityHostile, CapacityHealthy time.Duration
}

// soakFleet is what the soak serves besides the healthy namespace.
type soakFleet struct {
	// HostilePerKind pods of each of the first round's kinds, in
	// soakHostileNS.
	HostilePerKind int
	// TenantNamespaces namespaces of TenantPods pods each of the second
	// round's kinds (tenantPlan), named soak-tenant-N.
	TenantNamespaces, TenantPods int
	// HangAfterAnswer pods that answer once and then hang, in soakHangNS.
	HangAfterAnswer int
	// Selectors distinct label selectors asked of the healthy namespace
	// once the fleet is up.
	Selectors int
}

func (f soakFleet) pods() int {
	return f.HostilePerKind*firstRoundKinds + f.TenantNamespaces*f.TenantPods + f.HangAfterAnswer
}

// firstRoundKinds is len(hostile.Kinds(...)).
const firstRoundKinds = 13

// soakReport is the soak's outcome.
type soakReport struct {
	Healthy, Hostile int
	Fleet            soakFleet
	Interval, For    time.Duration
	Samples          []soakSample
	// SelectorFlood is how long the selector flood took, and the RSS
	// right after it.
	SelectorFlood    time.Duration
	SelectorFloodRSS float64
	// CycleP99 is the upper bound of the bucket holding the 99th
	// percentile of the cycles run during the soak.
	CycleP99 float64
	// HealthyListed and HostileListed are what the last queue-depth
	// lists named; HostileMax is the largest value served for a hostile pod.
	HealthyListed, HostileListed int
	HostileMax                   float64
	// MemoryLimit is the adapter's memory cgroup's limit (0: none),
	// MemoryPeak the most the cgroup held and OOMKills how often the
	// kernel killed the adapter for passing the limit.
	MemoryLimit, MemoryPeak, OOMKills int64
}

const (
	soakHealthyNS = "soak-healthy"
	soakHostileNS = "soak-hostile"
	soakHangNS    = "soak-hang"
	// soakTenantNS prefixes the tenant namespaces.
	soakTenantNS = "soak-tenant-"
)

// hostileNamespace reports whether ns is one of the soak's hostile ones.
func hostileNamespace(ns string) bool {
	return ns == soakHostileNS || ns == soakHangNS || strings.HasPrefix(ns, soakTenantNS)
}

// soak keeps n healthy pods and the fleet scraped for d, looking at the
// adapter every step: its resident memory, its scrape cycles, how stale the
// healthy pods' newest samples are, and how long a capacity read takes.
func (b *bench) soak(ctx context.Context, n int, fleet soakFleet, interval, d, step time.Duration) (*soakReport, error) {
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: soakHealthyNS}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := b.createPods(ctx, soakHealthyNS, n); err != nil {
		return nil, err
	}
	pods, err := b.waitReady(ctx, soakHealthyNS, n)
	if err != nil {
		return nil, err
	}
	if err := b.serve(ctx, pods); err != nil {
		return nil, err
	}
	if err := b.waitFull(ctx, soakHealthyNS, "inference_queue_depth", "app="+appLabel, n); err != nil {
		return nil, err
	}
	b.log.Info("healthy pods served; adding the hostile fleet", "healthy", n, "fleet", fmt.Sprintf("%+v", fleet))
	if err := b.createFleet(ctx, fleet); err != nil {
		return nil, err
	}
	rep := &soakReport{Healthy: n, Hostile: fleet.pods(), Fleet: fleet, Interval: interval, For: d}
	if fleet.Selectors > 0 {
		if rep.SelectorFlood, err = b.floodSelectors(ctx, soakHealthyNS, fleet.Selectors); err != nil {
			return nil, err
		}
		if rep.SelectorFloodRSS, err = statusMiB(b.env.AdapterPID(), "VmRSS"); err != nil {
			return nil, err
		}
		b.log.Info("selector flood", "selectors", fleet.Selectors, "took", rep.SelectorFlood.Round(time.Millisecond), "rssMiB", math.Round(rep.SelectorFloodRSS))
	}
	start := time.Now()
	tick := time.NewTicker(step)
	defer tick.Stop()
	for {
		s, err := b.lookAtAdapter(ctx, start)
		if err != nil {
			return nil, errors.Join(err, b.killedForMemory())
		}
		if fleet.TenantNamespaces > 0 {
			if s.CapacityHostile, err = b.capacityRead(ctx, soakTenantNS+"0", "m"); err != nil {
				return nil, err
			}
		}
		if s.CapacityHealthy, err = b.capacityRead(ctx, soakHealthyNS, "llama"); err != nil {
			return nil, err
		}
		// What holds the heap when the adapter is at its largest.
		if len(rep.Samples) == 0 || s.RSSMiB > slices.MaxFunc(rep.Samples, func(a, b soakSample) int { return cmp.Compare(a.RSSMiB, b.RSSMiB) }).RSSMiB {
			if err := b.saveHeapProfile(ctx, "heap-soak-peak.pb.gz"); err != nil {
				return nil, err
			}
		}
		rep.Samples = append(rep.Samples, s)
		b.log.Info("soak", "at", s.At.Round(time.Second), "rssMiB", math.Round(s.RSSMiB), "heapMiB", math.Round(s.HeapMiB),
			"fresh", s.Fresh, "worstStaleness", s.WorstStaleness.Round(100*time.Millisecond), "cycles", s.Cycles,
			"capacityRead", s.CapacityHostile.Round(time.Millisecond))
		if time.Since(start) >= d {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
	if b.memLimit > 0 {
		rep.MemoryLimit = b.memLimit
		if rep.MemoryPeak, rep.OOMKills, err = b.env.AdapterMemory(); err != nil {
			return nil, err
		}
	}
	rep.CycleP99 = bucketQuantile(0.99, rep.Samples[0].cycleBuckets, rep.Samples[len(rep.Samples)-1].cycleBuckets)
	if rep.HealthyListed, _, err = b.listValues(ctx, soakHealthyNS); err != nil {
		return nil, err
	}
	if rep.HostileListed, rep.HostileMax, err = b.listValues(ctx, soakHostileNS); err != nil {
		return nil, err
	}
	return rep, nil
}

// killedForMemory says whether the kernel killed the adapter for passing
// its memory limit: the reason a look at it failed, if so.
func (b *bench) killedForMemory() error {
	if b.memLimit == 0 {
		return nil
	}
	_, kills, err := b.env.AdapterMemory()
	if err != nil || kills == 0 {
		return err
	}
	return fmt.Errorf("the kernel killed the adapter %d times for passing its memory limit of %d MiB", kills, b.memLimit>>20)
}

// createFleet creates and serves the fleet's namespaces.
func (b *bench) createFleet(ctx context.Context, fleet soakFleet) error {
	if fleet.HostilePerKind > 0 {
		kinds, err := firstRound()
		if err != nil {
			return err
		}
		if len(kinds) != firstRoundKinds {
			return fmt.Errorf("the first round has %d kinds, not %d", len(kinds), firstRoundKinds)
		}
		if err := b.createHostile(ctx, soakHostileNS, kinds, fleet.HostilePerKind); err != nil {
			return err
		}
	}
	for i := range fleet.TenantNamespaces {
		if err := b.createPlanned(ctx, fmt.Sprint(soakTenantNS, i), tenantPlan(fleet.TenantPods)); err != nil {
			return err
		}
		b.log.Info("tenant namespace served", "namespace", fmt.Sprint(soakTenantNS, i), "pods", fleet.TenantPods)
	}
	if fleet.HangAfterAnswer > 0 {
		plan := make([]string, fleet.HangAfterAnswer)
		for i := range plan {
			plan[i] = "hang-after-answer"
		}
		if err := b.createPlanned(ctx, soakHangNS, plan); err != nil {
			return err
		}
	}
	return nil
}

// lookAtAdapter samples the adapter's process and its own /metrics.
func (b *bench) lookAtAdapter(ctx context.Context, start time.Time) (soakSample, error) {
	s := soakSample{At: time.Since(start), HostileErrors: map[string]float64{}, HostileRejected: map[string]float64{}}
	pid := b.env.AdapterPID()
	var err error
	if s.RSSMiB, err = statusMiB(pid, "VmRSS"); err != nil {
		return s, err
	}
	body, err := b.adapterGet(ctx, "/metrics")
	if err != nil {
		return s, err
	}
	now := time.Now()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return s, fmt.Errorf("adapter /metrics: %w", err)
	}
	if f := fams["go_memstats_heap_inuse_bytes"]; f != nil && len(f.Metric) > 0 {
		s.HeapMiB = f.Metric[0].GetGauge().GetValue() / (1 << 20)
	}
	if f := fams["gpuscale_adapter_scrape_cycle_duration_seconds"]; f != nil && len(f.Metric) > 0 {
		h := f.Metric[0].GetHistogram()
		s.Cycles, s.CycleSeconds, s.cycleBuckets = h.GetSampleCount(), h.GetSampleSum(), h.GetBucket()
	}
	oldest := now
	for _, m := range fams["gpuscale_adapter_scrape_last_success_timestamp_seconds"].GetMetric() {
		if label(m, "namespace") != soakHealthyNS {
			continue
		}
		s.Fresh++
		if t := time.Unix(0, int64(m.GetGauge().GetValue()*1e9)); t.Before(oldest) {
			oldest = t
		}
	}
	s.WorstStaleness = now.Sub(oldest)
	for _, m := range fams["gpuscale_adapter_scrape_errors_total"].GetMetric() {
		if hostileNamespace(label(m, "namespace")) {
			s.HostileErrors[label(m, "reason")] += m.GetCounter().GetValue()
		}
	}
	for _, m := range fams["gpuscale_adapter_rejected_values_total"].GetMetric() {
		if hostileNamespace(label(m, "namespace")) {
			s.HostileRejected[label(m, "reason")] += m.GetCounter().GetValue()
		}
	}
	return s, nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// listValues lists inference_queue_depth for every pod of ns as the HPA
// would, returning how many pods got a value and the largest; a namespace
// where none has one answers NotFound, which is zero pods.
func (b *bench) listValues(ctx context.Context, ns string) (int, float64, error) {
	body, err := b.list(ctx, ns, "inference_queue_depth", "app="+appLabel)
	if apierrors.IsNotFound(err) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var l struct {
		Items []struct {
			Value string `json:"value"`
		} `json:"items"`
	}
	if err := json.Unmarshal(body, &l); err != nil {
		return 0, 0, err
	}
	most := 0.0
	for _, it := range l.Items {
		var v float64
		if _, err := fmt.Sscan(strings.TrimSuffix(it.Value, "m"), &v); err == nil {
			if strings.HasSuffix(it.Value, "m") {
				v /= 1000
			}
			most = max(most, v)
		}
	}
	return len(l.Items), most, nil
}

// bucketQuantile is the upper bound of the bucket that holds quantile q
// of the observations between two readings of one cumulative histogram.
func bucketQuantile(q float64, before, after []*dto.Bucket) float64 {
	counts := make([]float64, len(after))
	for i, bk := range after {
		counts[i] = float64(bk.GetCumulativeCount())
		if i < len(before) {
			counts[i] -= float64(before[i].GetCumulativeCount())
		}
	}
	if len(counts) == 0 {
		return math.NaN()
	}
	total := counts[len(counts)-1]
	for i, c := range counts {
		if total > 0 && c >= q*total {
			return after[i].GetUpperBound()
		}
	}
	return math.Inf(1)
}

// loadAverage is /proc/loadavg's three averages.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], ", ")
}

// write saves the soak's report as Markdown and its samples as CSV.
func (r *soakReport) write(dir string) (string, error) {
	var csv strings.Builder
	csv.WriteString("seconds,rss_mib,heap_mib,fresh_healthy,worst_staleness_seconds,cycles,cycle_seconds_total,capacity_read_hostile_ms,capacity_read_healthy_ms\n")
	peakRSS, worst := r.SelectorFloodRSS, time.Duration(0)
	var capHostile, capHealthy time.Duration
	for _, s := range r.Samples {
		fmt.Fprintf(&csv, "%.0f,%.1f,%.1f,%d,%.2f,%d,%.2f,%.1f,%.1f\n", s.At.Seconds(), s.RSSMiB, s.HeapMiB, s.Fresh, s.WorstStaleness.Seconds(), s.Cycles, s.CycleSeconds,
			float64(s.CapacityHostile.Microseconds())/1e3, float64(s.CapacityHealthy.Microseconds())/1e3)
		peakRSS = max(peakRSS, s.RSSMiB)
		worst = max(worst, s.WorstStaleness)
		capHostile, capHealthy = max(capHostile, s.CapacityHostile), max(capHealthy, s.CapacityHealthy)
	}
	first, last := r.Samples[0], r.Samples[len(r.Samples)-1]
	cycles := last.Cycles - first.Cycles
	mean := math.NaN()
	if cycles > 0 {
		mean = (last.CycleSeconds - first.CycleSeconds) / float64(cycles)
	}
	reasons := make([]string, 0, len(last.HostileErrors))
	for k := range last.HostileErrors {
		reasons = append(reasons, k)
	}
	slices.Sort(reasons)
	var md strings.Builder
	fmt.Fprintf(&md, "# Soak: %d healthy pods and %d hostile targets for %v\n\n", r.Healthy, r.Hostile, r.For)
	fmt.Fprintf(&md, "Scrape interval %v. One look at the adapter every %v (%d looks). Hostile: %d of each first-round kind; "+
		"%d tenant namespaces of %d pods (tenantPlan); %d hang-after-answer pods; %d distinct selectors asked of the healthy namespace "+
		"(in %v, RSS %.0f MiB after). Load average when it ended: %s.\n\n",
		r.Interval, r.For/time.Duration(max(1, len(r.Samples)-1)), len(r.Samples), r.Fleet.HostilePerKind,
		r.Fleet.TenantNamespaces, r.Fleet.TenantPods, r.Fleet.HangAfterAnswer, r.Fleet.Selectors, r.SelectorFlood.Round(time.Second), r.SelectorFloodRSS, loadAverage())
	if r.MemoryLimit > 0 {
		fmt.Fprintf(&md, "The adapter ran in a memory cgroup limited to %d MiB, as its container is: the cgroup's peak was %.0f MiB (RSS and the page cache charged to it), with %d OOM kills.\n\n",
			r.MemoryLimit>>20, float64(r.MemoryPeak)/(1<<20), r.OOMKills)
	}
	fmt.Fprintf(&md, "| peak RSS | worst healthy staleness | scrape cycles | cycle mean | cycle p99 (bucket bound) | healthy pods listed | hostile pods listed | largest hostile value served |\n|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&md, "| %.0f MiB | %v | %d | %.2f s | <= %g s | %d of %d | %d of %d | %g |\n\n", peakRSS, worst.Round(100*time.Millisecond), cycles, mean, r.CycleP99,
		r.HealthyListed, r.Healthy, r.HostileListed, r.Hostile, r.HostileMax)
	fmt.Fprintf(&md, "Slowest capacity read (a model's inference_capacity_utilization through the kube-apiserver): %v in a tenant namespace, %v in the healthy one.\n\n",
		capHostile.Round(time.Millisecond), capHealthy.Round(time.Millisecond))
	md.WriteString("Hostile scrape errors by reason, over the soak:\n\n| reason | errors |\n|---|---|\n")
	for _, k := range reasons {
		fmt.Fprintf(&md, "| %s | %.0f |\n", k, last.HostileErrors[k]-first.HostileErrors[k])
	}
	rejected := make([]string, 0, len(last.HostileRejected))
	for k := range last.HostileRejected {
		rejected = append(rejected, k)
	}
	slices.Sort(rejected)
	md.WriteString("\nValues rejected from the hostile pods' stored scrapes, by reason, over the soak:\n\n| reason | values |\n|---|---|\n")
	for _, k := range rejected {
		fmt.Fprintf(&md, "| %s | %.0f |\n", k, last.HostileRejected[k]-first.HostileRejected[k])
	}
	md.WriteString("\n| minute | RSS MiB | heap MiB | healthy pods fresh | worst staleness |\n|---|---|---|---|---|\n")
	next := time.Duration(0)
	for _, s := range r.Samples {
		if s.At >= next {
			fmt.Fprintf(&md, "| %.0f | %.0f | %.0f | %d | %v |\n", s.At.Minutes(), s.RSSMiB, s.HeapMiB, s.Fresh, s.WorstStaleness.Round(100*time.Millisecond))
			next += time.Minute
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "soak.csv"), []byte(csv.String()), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "soak.md")
	return path, os.WriteFile(path, []byte(md.String()), 0o644)
}
