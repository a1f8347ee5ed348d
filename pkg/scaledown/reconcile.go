package scaledown

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// pendingTTL is how long a successful patch is trusted over an informer
// cache that has not caught up with it yet. Past it the cache wins, so a
// value someone else changed back is patched again.
const pendingTTL = 30 * time.Second

// retryAfter is when a reconcile whose patches failed runs again.
const retryAfter = 5 * time.Second

// Patch kinds, as labels of the patch counter.
const (
	kindDeletionCost = "deletion_cost"
	kindProtect      = "protect"
	kindUnprotect    = "unprotect"
)

// Result is what one reconcile did.
type Result struct {
	// Wanted is the number of pods whose annotations differ from what the
	// controller wants.
	Wanted int
	// Patched, Failed and RateLimited split Wanted: patches that
	// succeeded, that failed (retried later) and that the rate limit left
	// for a later reconcile.
	Patched, Failed, RateLimited int
	// RequeueAfter, when set, asks for the next reconcile sooner than the
	// resync period.
	RequeueAfter time.Duration
}

// pendingPatch is a patch that succeeded, held until the cache shows it.
type pendingPatch struct {
	set map[string]*string
	at  time.Time
}

// change is the patch one pod needs.
type change struct {
	pod   *corev1.Pod
	set   map[string]*string // nil value: remove the annotation
	kinds []string
	cost  int
	// nodeMoved: the cost's node rank changed (or it had none).
	nodeMoved bool
}

// priority orders patches when the rate limit cannot take them all: a
// serving replica's protection first; then costs that move a pod to
// another node rank (what empties nodes), then reorderings within a node,
// each from the lowest cost (the next replicas to go); clearing
// protection last.
func (ch *change) priority() int {
	switch {
	case slices.Contains(ch.kinds, kindProtect):
		return 0
	case ch.nodeMoved:
		return 1
	case slices.Contains(ch.kinds, kindDeletionCost):
		return 2
	}
	return 3
}

// Reconcile computes every managed pod's annotations from the caches and
// the sample store, patches those that differ (rate-limited), and
// refreshes the metrics. Errors are logged and counted, never returned:
// what failed is retried by a later reconcile.
func (c *Controller) Reconcile(ctx context.Context) Result {
	now := c.cfg.Clock.Now()
	pods, err := c.cfg.Pods.List(labels.Everything())
	if err != nil {
		c.log.Error("listing pods from the cache", "err", err)
		return Result{RequeueAfter: retryAfter}
	}
	nodes, err := c.cfg.Nodes.List(labels.Everything())
	if err != nil {
		c.log.Error("listing nodes from the cache", "err", err)
		return Result{RequeueAfter: retryAfter}
	}
	loads := c.loads(ctx, pods)
	p := buildPlan(pods, nodes, c.cfg.GPUResource, func(pod *corev1.Pod) load { return loads[pod.UID] })

	c.mu.Lock()
	changes := c.changes(p, now)
	c.mu.Unlock()

	slices.SortStableFunc(changes, func(a, b change) int {
		return cmp.Or(cmp.Compare(a.priority(), b.priority()), cmp.Compare(a.cost, b.cost))
	})
	res := Result{Wanted: len(changes)}
	for i := range changes {
		if !c.limiter.AllowN(now, 1) {
			res.RateLimited = len(changes) - i
			c.countDeferred(changes[i:])
			res.RequeueAfter = max(time.Duration(float64(time.Second)/c.cfg.PatchQPS), time.Millisecond)
			break
		}
		if c.patch(ctx, &changes[i], now) {
			res.Patched++
		} else {
			res.Failed++
			res.RequeueAfter = retryAfter
		}
	}
	if res.RateLimited == 0 {
		c.countDeferred(nil)
	}
	if res.RateLimited > 0 && res.Failed > 0 {
		res.RequeueAfter = retryAfter
	}
	c.mu.Lock()
	c.updateSnapshot(p, now)
	c.snap.backlog = res.RateLimited
	c.mu.Unlock()
	return res
}

// countDeferred counts the pods whose patch the rate limit deferred and
// that were not already waiting after the last reconcile: a backlog
// retried every 1/qps is counted once, so the counter's rate is how fast
// patches are deferred, not how often they are retried.
func (c *Controller) countDeferred(waiting []change) {
	next := make(map[types.UID]bool, len(waiting))
	for _, ch := range waiting {
		next[ch.pod.UID] = true
		if !c.deferred[ch.pod.UID] {
			c.metrics.rateLimited.Inc()
		}
	}
	c.deferred = next
}

// loadMetrics add up to a pod's load: queued plus running requests.
// kvMetric is the share of its KV cache in use.
var loadMetrics, kvMetric = func() ([2]provider.Metric, provider.Metric) {
	q, okQ := provider.MetricByName(provider.QueueDepth)
	r, okR := provider.MetricByName(provider.RequestsRunning)
	kv, okKV := provider.MetricByName(provider.KVCacheUtilization)
	if !okQ || !okR || !okKV {
		panic("scaledown: the provider serves no queue depth, running requests or KV cache use")
	}
	return [2]provider.Metric{q, r}, kv
}()

// loads reads the managed pods' loads, one batch per namespace and metric
// (with --source=prometheus, one query each). A pod without a fresh value
// of either request metric, or whose namespace's query failed, has unknown
// load; one without a KV value is ranked by its requests alone.
func (c *Controller) loads(ctx context.Context, pods []*corev1.Pod) map[types.UID]load {
	byNS := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if isManaged(p) && active(p) && p.DeletionTimestamp == nil {
			byNS[p.Namespace] = append(byNS[p.Namespace], p)
		}
	}
	out := make(map[types.UID]load, len(pods))
	for ns, nsPods := range byNS {
		set := provider.NewPodSet(ns, nsPods)
		for _, m := range loadMetrics {
			vals, err := c.cfg.Loads.Pods(ctx, set, m, labels.Everything())
			if err == nil && len(vals) != len(nsPods) {
				err = fmt.Errorf("%d values for %d pods", len(vals), len(nsPods))
			}
			if err != nil {
				c.metrics.loadErrors.Inc()
				c.log.Error("reading pod loads; their load is unknown", "namespace", ns, "metric", m.Name, "err", err)
				continue
			}
			for i, v := range vals {
				if v.Valid() {
					l := out[nsPods[i].UID]
					l.value, l.known = l.value+v.V, true
					out[nsPods[i].UID] = l
				}
			}
		}
		if slices.ContainsFunc(nsPods, func(p *corev1.Pod) bool { return out[p.UID].known }) {
			c.kvLoads(ctx, set, out) // KV use only orders known loads
		}
	}
	return out
}

// kvLoads adds the KV cache in use to the loads of set's pods.
func (c *Controller) kvLoads(ctx context.Context, set *provider.PodSet, out map[types.UID]load) {
	vals, err := c.cfg.Loads.Pods(ctx, set, kvMetric, labels.Everything())
	if err == nil && len(vals) != len(set.Pods) {
		err = fmt.Errorf("%d values for %d pods", len(vals), len(set.Pods))
	}
	if err != nil {
		c.metrics.loadErrors.Inc()
		c.log.Error("reading pods' KV cache use; they rank by their requests alone", "namespace", set.Namespace, "err", err)
		return
	}
	for i, v := range vals {
		if l, ok := out[set.Pods[i].UID]; ok && v.Valid() {
			l.kv, l.kvKnown = v.V, true
			out[set.Pods[i].UID] = l
		}
	}
}

// changes lists the patches the plan needs and forgets state of pods and
// nodes that are gone. c.mu is held.
func (c *Controller) changes(p plan, now time.Time) []change {
	seen := make(map[types.UID]bool, len(p.managed))
	var out []change
	for _, mp := range p.managed {
		uid := mp.pod.UID
		seen[uid] = true
		cur := c.effective(mp.pod, now)
		ch := change{pod: mp.pod, set: map[string]*string{}, cost: mp.cost}
		if old, want := cur(DeletionCostAnnotation), strconv.Itoa(mp.cost); old != want {
			ch.set[DeletionCostAnnotation] = &want
			ch.kinds = append(ch.kinds, kindDeletionCost)
			n, err := strconv.Atoi(old)
			ch.nodeMoved = err != nil || n/costStride != mp.cost/costStride
		}
		if protect, decided := c.protection(mp, cur, now); decided {
			_, ours := lookup(cur, ProtectedAnnotation)
			switch {
			case protect && (!ours || cur(SafeToEvictAnnotation) != "false"):
				f, t := "false", "true"
				ch.set[SafeToEvictAnnotation], ch.set[ProtectedAnnotation] = &f, &t
				ch.kinds = append(ch.kinds, kindProtect)
			case !protect && ours:
				ch.set[SafeToEvictAnnotation], ch.set[ProtectedAnnotation] = nil, nil
				ch.kinds = append(ch.kinds, kindUnprotect)
			}
		}
		if len(ch.kinds) > 0 {
			out = append(out, ch)
		}
	}
	for uid := range c.idleSince {
		if !seen[uid] {
			delete(c.idleSince, uid)
		}
	}
	for uid := range c.pending {
		if !seen[uid] {
			delete(c.pending, uid)
		}
	}
	return out
}

// annotationsView reads an annotation as the controller believes it is:
// "" when absent.
type annotationsView func(key string) string

func lookup(v annotationsView, key string) (string, bool) {
	s := v(key)
	return s, s != ""
}

// effective overlays a recent successful patch on the cached pod, so a
// reconcile that runs before the informer has seen the patch does not send
// it again. c.mu is held.
func (c *Controller) effective(p *corev1.Pod, now time.Time) annotationsView {
	rec, ok := c.pending[p.UID]
	if ok && (now.Sub(rec.at) >= pendingTTL || applied(p, rec.set)) {
		delete(c.pending, p.UID)
		ok = false
	}
	return func(key string) string {
		if ok {
			if v, has := rec.set[key]; has {
				if v == nil {
					return ""
				}
				return *v
			}
		}
		return p.Annotations[key]
	}
}

func applied(p *corev1.Pod, set map[string]*string) bool {
	for k, v := range set {
		got, has := p.Annotations[k]
		if (v == nil) == has || v != nil && *v != got {
			return false
		}
	}
	return true
}

// protection decides whether a managed pod should carry safe-to-evict
// "false": yes while it serves, no once it has been idle for IdleTime.
// decided is false when the controller leaves it as it is: the load is
// unknown (unknown is not idle), it has not been idle long enough, or the
// annotation was set by someone else. c.mu is held.
func (c *Controller) protection(mp managedPod, cur annotationsView, now time.Time) (protect, decided bool) {
	_, ours := lookup(cur, ProtectedAnnotation)
	if _, set := lookup(cur, SafeToEvictAnnotation); set && !ours {
		return false, false
	}
	uid := mp.pod.UID
	switch {
	case !mp.load.known:
		delete(c.idleSince, uid)
		return false, false
	case mp.load.value > 0:
		delete(c.idleSince, uid)
		return true, true
	}
	since, ok := c.idleSince[uid]
	if !ok {
		since = now
		c.idleSince[uid] = now
	}
	if now.Sub(since) >= c.cfg.IdleTime {
		return false, true
	}
	return false, false
}

// patch sends one JSON merge patch of the pod's annotations. The pod's UID
// rides along as a precondition, so a patch meant for a deleted pod never
// lands on a new one of the same name.
func (c *Controller) patch(ctx context.Context, ch *change, now time.Time) bool {
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{"uid": ch.pod.UID, "annotations": ch.set}})
	if err != nil {
		c.count(ch, "error")
		c.log.Error("encoding a patch", "pod", klogRef(ch.pod), "err", err)
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = c.cfg.Client.CoreV1().Pods(ch.pod.Namespace).Patch(ctx, ch.pod.Name, types.MergePatchType, body, metav1.PatchOptions{})
	result := "ok"
	switch {
	case err == nil:
	case apierrors.IsConflict(err):
		result = "conflict"
	case apierrors.IsNotFound(err):
		result = "not_found"
	default:
		result = "error"
	}
	c.count(ch, result)
	if err != nil {
		c.log.Warn("patching pod annotations; retrying on a later reconcile", "pod", klogRef(ch.pod), "kinds", ch.kinds, "result", result, "err", err)
		return false
	}
	c.log.Debug("patched pod annotations", "pod", klogRef(ch.pod), "kinds", ch.kinds, "cost", ch.cost)
	c.mu.Lock()
	c.pending[ch.pod.UID] = pendingPatch{set: ch.set, at: now}
	c.mu.Unlock()
	return true
}

func (c *Controller) count(ch *change, result string) {
	for _, k := range ch.kinds {
		c.metrics.patches.WithLabelValues(k, result).Inc()
	}
}

func klogRef(p *corev1.Pod) string { return fmt.Sprintf("%s/%s", p.Namespace, p.Name) }
