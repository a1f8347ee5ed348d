package scaledown

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	utilDesc = prometheus.NewDesc("gpuscale_scaledown_node_gpu_utilization",
		"GPU node utilization as the cluster autoscaler computes it: GPUs requested by the node's pods over allocatable GPUs.",
		[]string{"node"}, nil)
	gpuPodsDesc = prometheus.NewDesc("gpuscale_scaledown_node_gpu_pods",
		"Pods requesting GPUs on the node, not terminating: what consolidation ranks nodes by.",
		[]string{"node"}, nil)
	belowDesc = prometheus.NewDesc("gpuscale_scaledown_node_below_threshold",
		"1 when the node's GPU utilization is below --scale-down-gpu-utilization-threshold.",
		[]string{"node"}, nil)
	blockedDesc = prometheus.NewDesc("gpuscale_scaledown_node_blocked",
		"What keeps the cluster autoscaler from removing the node: pods annotated safe-to-evict=false, pods without a controller, or the node's scale-down-disabled annotation (1).",
		[]string{"node", "reason"}, nil)
	unneededDesc = prometheus.NewDesc("gpuscale_scaledown_node_unneeded_seconds",
		"How long the node has been below the threshold with nothing blocking its removal; 0 otherwise.",
		[]string{"node"}, nil)
	candidateDesc = prometheus.NewDesc("gpuscale_scaledown_node_removal_candidate",
		"1 when the node has been unneeded for at least --scale-down-unneeded-time: the cluster autoscaler removes it if its pods fit elsewhere.",
		[]string{"node"}, nil)
	managedDesc = prometheus.NewDesc("gpuscale_scaledown_managed_pods",
		"Managed pods on nodes (label gpuscale.io/scale-down=managed).", nil, nil)
	protectedDesc = prometheus.NewDesc("gpuscale_scaledown_protected_pods",
		"Managed pods carrying safe-to-evict=false.", nil, nil)
	leaderDesc = prometheus.NewDesc("gpuscale_scaledown_leader",
		"1 in the adapter replica that runs the scale-down controller; only it reports node metrics.", nil, nil)
	backlogDesc = prometheus.NewDesc("gpuscale_scaledown_patch_backlog",
		"Pods whose patch the rate limit left for a later reconcile, as of the last reconcile.", nil, nil)
	lastDesc = prometheus.NewDesc("gpuscale_scaledown_last_reconcile_timestamp_seconds",
		"When the controller last reconciled.", nil, nil)
)

// counters are the controller's cumulative metrics.
type counters struct {
	patches     *prometheus.CounterVec
	rateLimited prometheus.Counter
	loadErrors  prometheus.Counter
}

func newCounters() *counters {
	return &counters{
		patches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_scaledown_patches_total",
			Help: "Pod annotation patches by kind (deletion_cost, protect, unprotect) and result (ok, conflict, not_found, error); a patch of several kinds counts under each.",
		}, []string{"kind", "result"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_scaledown_patch_rate_limited_total",
			Help: "Pod patches the rate limit (--scale-down-patch-qps, --scale-down-patch-burst) deferred to a later reconcile; a pod still waiting from the last reconcile is not counted again.",
		}),
		loadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_scaledown_load_errors_total",
			Help: "Batches of pod loads (one namespace, one metric) the scale-down controller could not read from its source; those pods' load is unknown, so their protection is left as it is.",
		}),
	}
}

// nodeState is one GPU node in the snapshot metrics report.
type nodeState struct {
	view      nodeView
	below     bool
	unneeded  time.Duration
	candidate bool
}

// snapshot is what the last reconcile saw, for metrics.
type snapshot struct {
	at                 time.Time
	nodes              []nodeState
	managed, protected int
	backlog            int
}

// updateSnapshot records the plan's view and tracks how long each node
// has been unneeded. c.mu is held.
func (c *Controller) updateSnapshot(p plan, now time.Time) {
	s := snapshot{at: now, nodes: make([]nodeState, 0, len(p.nodes)), managed: len(p.managed)}
	present := make(map[string]bool, len(p.nodes))
	for _, v := range p.nodes {
		present[v.name] = true
		ns := nodeState{view: *v, below: v.utilization() < c.cfg.GPUUtilizationThreshold}
		if ns.below && !v.isBlocked() {
			since, ok := c.belowSince[v.name]
			if !ok {
				since = now
				c.belowSince[v.name] = now
			}
			ns.unneeded = now.Sub(since)
			ns.candidate = ns.unneeded >= c.cfg.UnneededTime
		} else {
			delete(c.belowSince, v.name)
		}
		s.nodes = append(s.nodes, ns)
	}
	for n := range c.belowSince {
		if !present[n] {
			delete(c.belowSince, n)
		}
	}
	for _, mp := range p.managed {
		if c.effective(mp.pod, now)(SafeToEvictAnnotation) == "false" {
			s.protected++
		}
	}
	c.snap = s
}

// collector adapts a Controller to prometheus.Collector.
type collector struct{ c *Controller }

// Describe implements prometheus.Collector.
func (col collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{utilDesc, gpuPodsDesc, belowDesc, blockedDesc, unneededDesc, candidateDesc,
		managedDesc, protectedDesc, backlogDesc, leaderDesc, lastDesc} {
		ch <- d
	}
	col.c.metrics.patches.Describe(ch)
	col.c.metrics.rateLimited.Describe(ch)
	col.c.metrics.loadErrors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (col collector) Collect(ch chan<- prometheus.Metric) {
	c := col.c
	col.c.metrics.patches.Collect(ch)
	col.c.metrics.rateLimited.Collect(ch)
	col.c.metrics.loadErrors.Collect(ch)
	ch <- gauge(leaderDesc, boolf(c.leading.Load()))
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.snap
	if s.at.IsZero() {
		return
	}
	ch <- gauge(lastDesc, float64(s.at.UnixNano())/1e9)
	ch <- gauge(managedDesc, float64(s.managed))
	ch <- gauge(protectedDesc, float64(s.protected))
	ch <- gauge(backlogDesc, float64(s.backlog))
	for _, n := range s.nodes {
		name := n.view.name
		ch <- gauge(utilDesc, n.view.utilization(), name)
		ch <- gauge(gpuPodsDesc, float64(n.view.gpuPods), name)
		ch <- gauge(belowDesc, boolf(n.below), name)
		ch <- gauge(unneededDesc, n.unneeded.Seconds(), name)
		ch <- gauge(candidateDesc, boolf(n.candidate), name)
		for i, r := range blockReasons {
			ch <- gauge(blockedDesc, float64(n.view.blocked[i]), name, r)
		}
	}
}

func gauge(d *prometheus.Desc, v float64, labels ...string) prometheus.Metric {
	return prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
}

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
