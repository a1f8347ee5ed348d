package autoscalebench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/recommend"
)

// disaggRun is one policy's two pools during a disaggregated replay.
type disaggRun struct {
	policy, namespace, describe string
	selectors                   [2]labels.Selector

	mu       sync.Mutex
	outcomes []RequestOutcome
	settled  []bool // stream finished, rejected, aborted or lost
	left     int    // requests not settled
	// gaps are the token gaps (trace seconds) of the requests arriving in
	// each trace minute.
	gaps    [][]float32
	samples []Sample // both pools together
	pools   [2][]Sample
	// capacity are the adapter's capacity estimates each pool's HPA
	// reads: its Deployment's (per-role) or the model's (single-pool,
	// the same for both).
	capacity [2][]CapacityParts
	// handoffs are the prefilled requests whose KV caches are on their
	// way to the decode pool; wake tells handOver of a new one.
	handoffs []handoff
	wake     chan struct{}
}

// handoff is a prefilled request and when (trace time since the start)
// its KV cache is at the decode pool.
type handoff struct {
	req int
	due time.Duration
}

// RunDisagg replays the plan's requests on every policy's two pools, in
// env started with p.EnvOptions on the same clock. A request is prefilled
// (its prompt and first token) on a prefill replica; when that finishes,
// its KV cache takes Transfer to reach the decode pool, where a decode
// replica takes it over (inferencesim.Request.KVReady) and generates its
// tokens. The TTFT is the request's arrival to the decode replica's first
// token; every later token's gap counts in the ITL of the request's minute.
func RunDisagg(ctx context.Context, env *devenv.Env, p *DisaggPlan, clock *Clock) (*DisaggRecording, Stats, error) {
	runs := make([]*disaggRun, len(p.Policies))
	for i, policy := range p.Policies {
		r := &disaggRun{policy: policy, namespace: "disagg-" + policy, outcomes: make([]RequestOutcome, len(p.Requests)),
			settled: make([]bool, len(p.Requests)), left: len(p.Requests), wake: make(chan struct{}, 1),
			gaps: make([][]float32, int(p.Duration/time.Minute)+1)}
		for j, req := range p.Requests {
			r.outcomes[j].Arrival = req.At
		}
		for k, role := range disaggPools {
			r.selectors[k] = labels.SelectorFromSet(labels.Set{"app": poolName(role)})
		}
		r.describe = p.describeDisagg(policy)
		if err := p.createPools(ctx, env, r); err != nil {
			return nil, Stats{}, err
		}
		runs[i] = r
	}
	if err := p.waitWarm(ctx, env, runs); err != nil {
		return nil, Stats{}, err
	}
	p.Log.Info("disaggregated replay starting", "requests", len(p.Requests), "policies", p.Policies,
		"static", p.Static, "initial", p.Initial, "max", p.MaxReplicas, "wall", p.wall(p.Duration).Round(time.Second))

	start, wallStart := clock.Now(), time.Now()
	if err := p.createHPAs(ctx, env, runs); err != nil {
		return nil, Stats{}, err
	}
	bgCtx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { p.releaseStart(bgCtx, env, runs) })
	bg.Go(func() { p.sample(bgCtx, env, runs, clock, start) })
	bg.Go(func() { p.sampleCapacity(bgCtx, env, runs, clock, start) })
	for _, r := range runs {
		bg.Go(func() { p.handOver(bgCtx, env, r, clock, start) })
	}
	stats, err := p.dispatch(ctx, env, runs, clock, start, wallStart)
	if err == nil {
		err = p.settle(ctx, runs, clock, start)
	}
	stop()
	bg.Wait()
	if err != nil {
		return nil, stats, err
	}
	p.logHPAs(ctx, env, runs)
	return p.recording(runs), stats, nil
}

// createHPAs makes each autoscaled policy's two HPAs.
func (p *DisaggPlan) createHPAs(ctx context.Context, env *devenv.Env, runs []*disaggRun) error {
	for _, r := range runs {
		if r.policy == DisaggStatic {
			continue
		}
		for k := range disaggPools {
			hpa, err := p.disaggAutoscaler(r.policy, r.namespace, k)
			if err != nil {
				return err
			}
			if _, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(r.namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
				return fmt.Errorf("autoscalebench: create the %s HPA of %s: %w", hpa.Name, r.policy, err)
			}
		}
	}
	return nil
}

// logHPAs logs each HPA's conditions at the end: why an HPA did not
// scale (a metric it could not read) is there.
func (p *DisaggPlan) logHPAs(ctx context.Context, env *devenv.Env, runs []*disaggRun) {
	for _, r := range runs {
		list, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(r.namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			p.Log.Warn("cannot list the HPAs", "policy", r.policy, "err", err)
			continue
		}
		for _, h := range list.Items {
			for _, c := range h.Status.Conditions {
				p.Log.Info("HPA condition at the end", "policy", r.policy, "hpa", h.Name, "type", c.Type, "status", c.Status, "reason", c.Reason, "message", c.Message)
			}
		}
	}
}

func (p *DisaggPlan) describeDisagg(policy string) string {
	switch policy {
	case DisaggStatic:
		return fmt.Sprintf("no autoscaler: %d prefill and %d decode replicas, sized offline in hindsight", p.Static[0], p.Static[1])
	case DisaggSinglePool:
		return fmt.Sprintf("both pools' HPAs on the model's External %s value %s, pods without a role; `adapter recommend` behavior; 1-%d prefill, 1-%d decode",
			provider.CapacityUtilization, recommend.CapacityTargetValue(), p.MaxReplicas[0], p.MaxReplicas[1])
	case DisaggPerRole:
		return fmt.Sprintf("each pool's HPA on its Deployment's %s value %s, pods labelled with their role; `adapter recommend` behavior; 1-%d prefill, 1-%d decode",
			provider.CapacityUtilization, recommend.CapacityTargetValue(), p.MaxReplicas[0], p.MaxReplicas[1])
	}
	return policy
}

// createPools makes r's namespace and its two pools.
func (p *DisaggPlan) createPools(ctx context.Context, env *devenv.Env, r *disaggRun) error {
	client := env.Cluster.Client()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: r.namespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("autoscalebench: namespace %s: %w", r.namespace, err)
	}
	sizes := p.Initial
	if r.policy == DisaggStatic {
		sizes = p.Static
	}
	for k := range disaggPools {
		d := p.poolDeployment(r.namespace, k, int32(sizes[k]), r.policy == DisaggPerRole)
		if _, err := client.AppsV1().Deployments(r.namespace).Create(ctx, d, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("autoscalebench: deployment %s in %s: %w", d.Name, r.namespace, err)
		}
	}
	return nil
}

// waitWarm waits until every pool has its replicas Ready and the adapter
// serves their queue depth.
func (p *DisaggPlan) waitWarm(ctx context.Context, env *devenv.Env, runs []*disaggRun) error {
	timeout := 2*p.wall(p.ModelLoad) + 2*time.Minute
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, r := range runs {
			want := p.Initial
			if r.policy == DisaggStatic {
				want = p.Static
			}
			for k, role := range disaggPools {
				c, err := takeCensusOf(ctx, env, r.namespace, poolName(role))
				if err != nil || c.ready < want[k] {
					last = fmt.Sprintf("%s %s: %d of %d replicas ready (%v)", r.policy, role, c.ready, want[k], err)
					return false, nil
				}
			}
			path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + r.namespace + "/pods/*/inference_queue_depth"
			if _, err := env.Cluster.Client().Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx); err != nil {
				last = fmt.Sprintf("%s: queue depth not served: %v", r.policy, err)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("autoscalebench: disaggregated pools not warm after %v: %w (last: %s)", timeout, err, last)
	}
	return nil
}

// dispatch sends every request to every policy's prefill pool at its
// arrival time on the compressed clock.
func (p *DisaggPlan) dispatch(ctx context.Context, env *devenv.Env, runs []*disaggRun, clock *Clock, start, wallStart time.Time) (Stats, error) {
	profile, err := inferencesim.ProfileByName(p.Profile)
	if err != nil {
		return Stats{}, err
	}
	var stats Stats
	err = pace(ctx, p.Requests, wallStart, p.wall, &stats, func(i int, req trace.Request) {
		whole := inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens}
		for _, r := range runs {
			// The whole request is checked as its server would: no
			// replica can hold it, and it is refused at once (HTTP 400).
			if whole.Validate(profile) != nil {
				r.settle(i, func(o *RequestOutcome) { o.Rejected = true })
				continue
			}
			sent := clock.Now().Sub(start)
			transfer := p.Transfer(req.ContextTokens)
			_, err := env.World.SendFollow(r.namespace, r.selectors[0], inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: 1}, inferencesim.Follow{
				Finished: func(c inferencesim.Completion) { r.prefilled(i, sent+c.Total+transfer) },
				Aborted:  func(bool) { r.settle(i, func(o *RequestOutcome) { o.Aborted = true }) },
			})
			if err != nil {
				// Lost, as a request to a Service without a ready
				// endpoint is: unserved.
				stats.NoBackend++
				r.settle(i, nil)
				p.Log.Debug("request not delivered", "policy", r.policy, "request", i, "err", err)
			}
		}
	})
	return stats, err
}

// settle marks request i settled once, after mark (if not nil) records
// how.
func (r *disaggRun) settle(i int, mark func(*RequestOutcome)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled[i] {
		return
	}
	if mark != nil {
		mark(&r.outcomes[i])
	}
	r.settled[i] = true
	r.left--
}

// prefilled queues request i's KV cache, at the decode pool at due. It
// runs with the prefill server locked, so it only queues.
func (r *disaggRun) prefilled(i int, due time.Duration) {
	r.mu.Lock()
	r.handoffs = append(r.handoffs, handoff{req: i, due: due})
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// noDecodeRetry is how often (wall time) a cache with no Ready decode
// replica to take it is offered again: it waits, as a prefill/decode
// router holds it.
const noDecodeRetry = 100 * time.Millisecond

// handOver gives each arrived KV cache to a Ready decode replica of r, in
// turn, until ctx is done.
func (p *DisaggPlan) handOver(ctx context.Context, env *devenv.Env, r *disaggRun, clock *Clock, start time.Time) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := clock.Now().Sub(start)
		r.mu.Lock()
		var due []handoff
		kept := r.handoffs[:0]
		next := time.Duration(-1)
		for _, h := range r.handoffs {
			if h.due <= now {
				due = append(due, h)
				continue
			}
			kept = append(kept, h)
			if next < 0 || h.due < next {
				next = h.due
			}
		}
		r.handoffs = kept
		r.mu.Unlock()
		slices.SortStableFunc(due, func(a, b handoff) int { return cmp.Compare(a.due, b.due) })
		sleep := time.Hour
		if next >= 0 {
			sleep = p.wall(next - now)
		}
		for _, h := range due {
			if !p.decode(env, r, clock, start, h.req) {
				r.mu.Lock()
				r.handoffs = append(r.handoffs, h)
				r.mu.Unlock()
				sleep = min(sleep, noDecodeRetry)
			}
		}
		timer.Reset(max(sleep, time.Millisecond))
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-timer.C:
		}
	}
}

// releaseStart lowers every HPA's minReplicas from the pool's starting
// size to 1 once the scale-down stabilization window has passed. An HPA
// that ran before the slice remembers, for that window, the size it held
// and scales down no further; a new one has no memory and may shrink a
// pool at its first sync, before the load it starts into has shown. The
// offline replay's HPA starts with that memory (offlinereplay.newHPA).
func (p *DisaggPlan) releaseStart(ctx context.Context, env *devenv.Env, runs []*disaggRun) {
	var window time.Duration
	// Every policy's HPAs have the same window (the start-up's).
	if down := p.behavior(DisaggPerRole).ScaleDown; down != nil && down.StabilizationWindowSeconds != nil {
		window = time.Duration(*down.StabilizationWindowSeconds) * time.Second
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(window):
	}
	one := int32(1)
	for _, r := range runs {
		if r.policy == DisaggStatic {
			continue
		}
		hpas := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(r.namespace)
		for _, role := range disaggPools {
			err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				h, err := hpas.Get(ctx, poolName(role), metav1.GetOptions{})
				if err != nil {
					return err
				}
				h.Spec.MinReplicas = &one
				_, err = hpas.Update(ctx, h, metav1.UpdateOptions{})
				return err
			})
			if err != nil && ctx.Err() == nil {
				p.Log.Warn("cannot lower an HPA's minReplicas to 1", "policy", r.policy, "hpa", poolName(role), "err", err)
			}
		}
	}
}

// decode sends request i, prefilled, to r's decode pool; false when no
// decode replica is Ready to take it.
func (p *DisaggPlan) decode(env *devenv.Env, r *disaggRun, clock *Clock, start time.Time, i int) bool {
	req := p.Requests[i]
	minute := int(req.At / time.Minute)
	sent := clock.Now().Sub(start)
	_, err := env.World.SendFollow(r.namespace, r.selectors[1],
		inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens, KVReady: true},
		inferencesim.Follow{
			FirstToken: func(ttft time.Duration) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if o := &r.outcomes[i]; !o.Served && !r.settled[i] {
					o.TTFT, o.Served = sent-req.At+ttft, true
				}
			},
			Token: func(gap time.Duration) {
				r.mu.Lock()
				r.gaps[minute] = append(r.gaps[minute], float32(gap.Seconds()))
				r.mu.Unlock()
			},
			Finished: func(inferencesim.Completion) { r.settle(i, nil) },
			Aborted:  func(bool) { r.settle(i, func(o *RequestOutcome) { o.Aborted = true }) },
		})
	switch {
	case errors.Is(err, inferencesim.ErrInvalidRequest):
		r.settle(i, func(o *RequestOutcome) { o.Rejected = true })
	case err != nil:
		return false
	}
	return true
}

// sample records every pool's replicas every SampleEvery of trace time
// until ctx is done.
func (p *DisaggPlan) sample(ctx context.Context, env *devenv.Env, runs []*disaggRun, clock *Clock, start time.Time) {
	t := time.NewTicker(p.wall(p.SampleEvery))
	defer t.Stop()
	for {
		at := clock.Now().Sub(start)
		for _, r := range runs {
			var pools [2]Sample
			var err error
			for k, role := range disaggPools {
				var c census
				if c, err = takeCensusOf(ctx, env, r.namespace, poolName(role)); err != nil {
					break
				}
				// A deleted pod's server holds its GPUs while it drains.
				_, draining := env.World.TerminatingNamed(r.namespace, poolName(role)+"-")
				pools[k] = Sample{At: at, Desired: c.desired, Ready: c.ready, Pods: c.pods, GPUs: c.gpus + draining}
			}
			if err != nil {
				if ctx.Err() == nil {
					p.Log.Warn("cannot sample a pool", "policy", r.policy, "err", err)
				}
				continue
			}
			r.mu.Lock()
			r.pools[0], r.pools[1] = append(r.pools[0], pools[0]), append(r.pools[1], pools[1])
			r.samples = append(r.samples, Sample{At: at, Desired: pools[0].Desired + pools[1].Desired,
				Ready: pools[0].Ready + pools[1].Ready, Pods: pools[0].Pods + pools[1].Pods, GPUs: pools[0].GPUs + pools[1].GPUs})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleCapacity records the adapter's capacity estimates of every
// autoscaled pool every capacitySampleEvery of trace time until ctx is
// done.
func (p *DisaggPlan) sampleCapacity(ctx context.Context, env *devenv.Env, runs []*disaggRun, clock *Clock, start time.Time) {
	t := time.NewTicker(p.wall(capacitySampleEvery))
	defer t.Stop()
	for {
		at := clock.Now().Sub(start)
		body, err := env.AdapterGet(ctx, "/metrics")
		for _, r := range runs {
			if err != nil || r.policy == DisaggStatic {
				continue
			}
			for k, role := range disaggPools {
				target := "model/" + disaggModel
				if r.policy == DisaggPerRole {
					target = "deployment/" + poolName(role)
				}
				var parts CapacityParts
				var ok bool
				if parts, ok, err = parseCapacityParts(body, r.namespace, target); ok {
					parts.At = at
					r.mu.Lock()
					r.capacity[k] = append(r.capacity[k], parts)
					r.mu.Unlock()
				}
			}
		}
		if err != nil && ctx.Err() == nil {
			p.Log.Warn("cannot read the adapter's capacity estimates", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// settle waits for the end of the slice, then up to Grace for streams
// still running.
func (p *DisaggPlan) settle(ctx context.Context, runs []*disaggRun, clock *Clock, start time.Time) error {
	return settleWithin(ctx, p.wall(p.Duration-clock.Now().Sub(start)), p.wall(p.Grace), func() bool {
		for _, r := range runs {
			r.mu.Lock()
			left := r.left
			r.mu.Unlock()
			if left > 0 {
				return false
			}
		}
		return true
	})
}
