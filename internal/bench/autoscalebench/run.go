package autoscalebench

import (
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

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// rateBucket is the resolution of the request-rate series in reports.
const rateBucket = 10 * time.Second

// policyRun is one policy's workload during a replay.
type policyRun struct {
	// policy names the run (what recordings call it), kind the policy it
	// runs; drain says whether its replicas drain (AbortSuffix).
	policy, kind, namespace string
	drain                   bool
	describe                string

	mu       sync.Mutex
	outcomes []RequestOutcome
	settled  int // requests served or rejected
	samples  []Sample
	capacity []CapacityParts // the capacity policy's estimates
}

// Stats describe how faithfully a replay ran.
type Stats struct {
	// DispatchLagP99 and DispatchLagMax are how late (in wall time)
	// requests were sent against their trace arrival times: a loaded
	// machine shows here before it distorts the results.
	DispatchLagP99, DispatchLagMax time.Duration
	// NoBackend counts requests sent while a policy had no ready replica.
	NoBackend int
}

// Run replays the plan on env, which must have been started with
// p.EnvOptions and the same clock, and returns what every policy did.
func Run(ctx context.Context, env *devenv.Env, p *Plan, clock *Clock) (*Recording, Stats, error) {
	runs := make([]*policyRun, len(p.Policies))
	for i, policy := range p.Policies {
		kind, drain := splitPolicy(policy)
		runs[i] = &policyRun{policy: policy, kind: kind, drain: drain, namespace: namespaceFor(policy), outcomes: make([]RequestOutcome, len(p.Requests))}
		for j, req := range p.Requests {
			runs[i].outcomes[j].Arrival = req.At
		}
		replicas := p.Initial
		if kind == PolicyStatic {
			replicas = p.Static
		}
		runs[i].describe = describe(kind, p.Targets, p.Static, 1, p.MaxReplicas)
		if !drain {
			runs[i].describe += "; no drain: a removed replica aborts what it holds"
		}
		if err := createWorkload(ctx, env, p, runs[i].namespace, int32(replicas), drain); err != nil {
			return nil, Stats{}, err
		}
	}
	if err := waitWarm(ctx, env, p, runs); err != nil {
		return nil, Stats{}, err
	}
	p.Log.Info("replay starting", "requests", len(p.Requests), "policies", p.Policies, "initial", p.Initial,
		"static", p.Static, "max", p.MaxReplicas, "wall", p.wall(p.Duration).Round(time.Second))

	start := clock.Now()
	wallStart := time.Now()
	for _, r := range runs {
		if r.kind == PolicyStatic || r.kind == PolicyLLMD {
			continue
		}
		hpa, err := autoscaler(r.kind, r.namespace, p.Targets, 1, int32(p.MaxReplicas), p.Speedup)
		if err != nil {
			return nil, Stats{}, err
		}
		if _, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(r.namespace).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			return nil, Stats{}, fmt.Errorf("autoscalebench: create the %s HPA: %w", r.policy, err)
		}
	}

	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	controllers := 1
	go func() {
		defer func() { sampled <- struct{}{} }()
		sample(sampleCtx, env, p, runs, clock, start)
	}()
	for _, r := range runs {
		switch r.kind {
		case PolicyLLMD:
			controllers++
			go func() {
				defer func() { sampled <- struct{}{} }()
				runLLMD(sampleCtx, env, p, r, clock, start)
			}()
		case PolicyCapacity:
			controllers++
			go func() {
				defer func() { sampled <- struct{}{} }()
				sampleCapacity(sampleCtx, env, p, r, clock, start)
			}()
		}
	}
	stats, err := dispatch(ctx, env, p, runs, wallStart)
	if err == nil {
		err = settle(ctx, p, runs, clock, start)
	}
	stopSampling()
	for range controllers {
		<-sampled
	}
	if err != nil {
		return nil, stats, err
	}
	return recording(p, runs), stats, nil
}

func createWorkload(ctx context.Context, env *devenv.Env, p *Plan, ns string, replicas int32, drain bool) error {
	client := env.Cluster.Client()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("autoscalebench: namespace %s: %w", ns, err)
	}
	var drainTemplate func(*corev1.PodTemplateSpec)
	if drain {
		drainTemplate = p.DrainMode.template(p.Drain, p.Speedup)
	}
	d := workload(ns, p.Profile, replicas, p.wall(p.ModelLoad), drainTemplate)
	if _, err := client.AppsV1().Deployments(ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("autoscalebench: deployment in %s: %w", ns, err)
	}
	return nil
}

// waitWarm waits until every workload has its replicas Ready and the
// adapter serves their queue depth, so that the first HPA syncs read
// metrics rather than gaps.
func waitWarm(ctx context.Context, env *devenv.Env, p *Plan, runs []*policyRun) error {
	timeout := 2*p.wall(p.ModelLoad) + 2*time.Minute
	var last string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, r := range runs {
			want := p.Initial
			if r.kind == PolicyStatic {
				want = p.Static
			}
			_, ready, _, err := count(ctx, env, r.namespace)
			if err != nil || ready < want {
				last = fmt.Sprintf("%s: %d of %d replicas ready (%v)", r.policy, ready, want, err)
				return false, nil
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
		return fmt.Errorf("autoscalebench: workloads not warm after %v: %w (last: %s)", timeout, err, last)
	}
	return nil
}

// count reads a workload's desired replicas and its Ready and live pods.
func count(ctx context.Context, env *devenv.Env, ns string) (desired, ready, pods int, err error) {
	c, err := takeCensus(ctx, env, ns)
	return c.desired, c.ready, c.pods, err
}

// census is a workload's desired replicas, its Ready and live pods, and
// the GPUs those pods request: a replica of several pods (a leader and
// its workers) holds the GPUs of all of them.
type census struct{ desired, ready, pods, gpus int }

func takeCensus(ctx context.Context, env *devenv.Env, ns string) (census, error) {
	return takeCensusOf(ctx, env, ns, workloadName)
}

// takeCensusOf is takeCensus of the Deployment name.
func takeCensusOf(ctx context.Context, env *devenv.Env, ns, name string) (census, error) {
	client := env.Cluster.Client()
	d, err := client.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return census{}, err
	}
	list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name, ResourceVersion: "0"})
	if err != nil {
		return census{}, err
	}
	c := census{desired: int(*d.Spec.Replicas)}
	for _, pod := range list.Items {
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		c.pods++
		c.gpus += int(scaledown.PodGPUs(&pod, scaledown.DefaultGPUResource))
		if simworld.Ready(&pod) {
			c.ready++
		}
	}
	return c, nil
}

// sample records every workload's replicas every SampleEvery of trace
// time until ctx is done.
func sample(ctx context.Context, env *devenv.Env, p *Plan, runs []*policyRun, clock *Clock, start time.Time) {
	t := time.NewTicker(p.wall(p.SampleEvery))
	defer t.Stop()
	for {
		at := clock.Now().Sub(start)
		for _, r := range runs {
			c, err := takeCensus(ctx, env, r.namespace)
			if err != nil {
				if ctx.Err() == nil {
					p.Log.Warn("cannot sample a workload", "policy", r.policy, "err", err)
				}
				continue
			}
			// kwok removes a deleted pod at once; its server, still in its
			// preStop sleep or draining, holds its GPUs until it exits.
			_, draining := env.World.Terminating(r.namespace)
			r.mu.Lock()
			r.samples = append(r.samples, Sample{At: at, Desired: c.desired, Ready: c.ready, Pods: c.pods, GPUs: c.gpus + draining})
			r.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// dispatch sends every request of the slice to every policy's workload at
// its arrival time on the compressed clock.
func dispatch(ctx context.Context, env *devenv.Env, p *Plan, runs []*policyRun, wallStart time.Time) (Stats, error) {
	selector := labels.SelectorFromSet(labels.Set{"app": workloadName})
	var stats Stats
	err := pace(ctx, p.Requests, wallStart, p.wall, &stats, func(i int, req trace.Request) {
		sim := inferencesim.Request{ContextTokens: req.ContextTokens, GeneratedTokens: req.GeneratedTokens}
		for _, r := range runs {
			_, err := env.World.SendFollow(r.namespace, selector, sim, inferencesim.Follow{FirstToken: r.firstToken(i), Aborted: r.aborted(i)})
			switch {
			case errors.Is(err, inferencesim.ErrInvalidRequest):
				// No replica can hold it: refused at once, as vLLM
				// answers HTTP 400, and counted apart.
				r.reject(i)
			case err != nil:
				// The request is lost, as one sent to a Service with no
				// ready endpoint is; it counts as unserved.
				stats.NoBackend++
				p.Log.Debug("request not delivered", "policy", r.policy, "request", i, "err", err)
			}
		}
	})
	return stats, err
}

// pace calls send with each request at its arrival, wall(At) after
// wallStart, and records in stats how late the calls came.
func pace(ctx context.Context, reqs []trace.Request, wallStart time.Time, wall func(time.Duration) time.Duration, stats *Stats, send func(int, trace.Request)) error {
	lags := make([]time.Duration, 0, len(reqs))
	timer := time.NewTimer(0)
	defer timer.Stop()
	for i, req := range reqs {
		due := wallStart.Add(wall(req.At))
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-timer.C:
			}
		}
		lags = append(lags, max(0, time.Since(due)))
		send(i, req)
	}
	if len(lags) > 0 {
		slices.Sort(lags)
		stats.DispatchLagMax = lags[len(lags)-1]
		stats.DispatchLagP99 = lags[min(len(lags)-1, len(lags)*99/100)]
	}
	return nil
}

// firstToken records request i's time to first token.
func (r *policyRun) firstToken(i int) func(time.Duration) {
	return func(ttft time.Duration) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if !r.outcomes[i].Served {
			r.outcomes[i].TTFT, r.outcomes[i].Served = ttft, true
			r.settled++
		}
	}
}

// aborted records that request i's replica was killed before its last
// token: a stream cut mid-way if it had been served, else a request that
// never will be.
func (r *policyRun) aborted(i int) func(streamed bool) {
	return func(bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		o := &r.outcomes[i]
		if o.Aborted {
			return
		}
		o.Aborted = true
		if !o.Served && !o.Rejected {
			r.settled++
		}
	}
}

// reject records that request i was refused: it will never be served.
func (r *policyRun) reject(i int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.outcomes[i].Served && !r.outcomes[i].Rejected {
		r.outcomes[i].Rejected = true
		r.settled++
	}
}

// settle waits for the end of the slice, then up to Grace for requests
// still waiting for their first token.
func settle(ctx context.Context, p *Plan, runs []*policyRun, clock *Clock, start time.Time) error {
	return settleWithin(ctx, p.wall(p.Duration-clock.Now().Sub(start)), p.wall(p.Grace), func() bool {
		for _, r := range runs {
			r.mu.Lock()
			done := r.settled == len(r.outcomes)
			r.mu.Unlock()
			if !done {
				return false
			}
		}
		return true
	})
}

// settleWithin waits rest (wall time: the slice's end), then up to grace
// until done.
func settleWithin(ctx context.Context, rest, grace time.Duration, done func() bool) error {
	if rest > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(rest):
		}
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, grace, true, func(context.Context) (bool, error) { return done(), nil })
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// recording assembles the results.
func recording(p *Plan, runs []*policyRun) *Recording {
	rec := &Recording{
		Trace: p.TracePath, Start: p.Start, Duration: p.Duration,
		Speedup: p.Speedup, SLO: p.SLO, StaticReplicas: p.Static, StaticMinutesMet: p.StaticMet,
		GPUsPerReplica: int(scaledown.PodGPUs(&corev1.Pod{Spec: workload("", p.Profile, 1, 0, nil).Spec.Template.Spec}, scaledown.DefaultGPUResource)),
		RateBucket:     rateBucket,
		Setup: fmt.Sprintf("%s (%s), model load %v, every workload starts at %d replicas, HPAs %d-%d, removed replicas drain: %s",
			p.Profile, p.profile.Name, p.ModelLoad, p.Initial, 1, p.MaxReplicas, p.drainSetup()),
	}
	buckets := int((p.Duration + rateBucket - 1) / rateBucket)
	rec.RequestRate = make([]float64, buckets)
	for _, r := range p.Requests {
		rec.RequestRate[min(buckets-1, int(r.At/rateBucket))] += 1 / rateBucket.Seconds()
	}
	for _, r := range runs {
		r.mu.Lock()
		rec.Policies = append(rec.Policies, PolicyRecording{
			Policy: r.policy, Describe: r.describe,
			Requests: slices.Clone(r.outcomes), Samples: slices.Clone(r.samples),
			Capacity: slices.Clone(r.capacity),
		})
		r.mu.Unlock()
	}
	return rec
}
