package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"

	"github.com/gpuscale/gpuscale/internal/offlinereplay"
	"github.com/gpuscale/gpuscale/pkg/capacity"
	"github.com/gpuscale/gpuscale/pkg/recommend"
)

// hpaTolerance is the HPA controller's default tolerance.
const hpaTolerance = 0.1

// policyOptions are the choices a sweep varies; their zero values, except
// where said, are the bench's.
type policyOptions struct {
	// schedule is the schedule policy's DURATION:N.
	schedule string
	// runningTarget is running-requests' averageValue (the bench's 16).
	runningTarget float64
	// objective and window are the capacity policy's TTFT objective and
	// prefill-time window; downWindow, when not 0, replaces the scale-down
	// stabilization window `adapter recommend` gives it.
	objective, window, downWindow time.Duration
	// maxReplicas bounds every autoscaled policy.
	maxReplicas int
	// parts, when set, is called with every capacity estimate.
	parts func(time.Time, capacity.Estimate)
}

// policy returns a policy and the HPA behavior it runs with, as the bench
// configures it.
func policy(name string, o policyOptions) (offlinereplay.Policy, offlinereplay.Behavior, error) {
	maxR := o.maxReplicas
	switch name {
	case "static":
		return nil, offlinereplay.Behavior{}, nil
	case "running-requests":
		return podsAverage{target: o.runningTarget}, offlinereplay.DefaultBehavior(1, maxR), nil
	case "capacity":
		cfg := capacity.DefaultConfig()
		cfg.Objective, cfg.Window = o.objective, o.window
		b := recommended(time.Minute, 1, maxR)
		if o.downWindow > 0 {
			b.DownWindow = o.downWindow
		}
		return &capacityPolicy{est: capacity.New(cfg, nil), parts: o.parts}, b, nil
	case "schedule":
		schedule := o.schedule
		at, n, ok := strings.Cut(schedule, ":")
		d, err := time.ParseDuration(at)
		if err != nil || !ok {
			return nil, offlinereplay.Behavior{}, fmt.Errorf("--schedule %q: want DURATION:N", schedule)
		}
		k, err := strconv.Atoi(n)
		if err != nil {
			return nil, offlinereplay.Behavior{}, fmt.Errorf("--schedule %q: %w", schedule, err)
		}
		b := offlinereplay.DefaultBehavior(1, max(k, maxR))
		b.UpPods, b.DownWindow = k, time.Hour
		return scheduled{at: d, n: k}, b, nil
	}
	return nil, offlinereplay.Behavior{}, fmt.Errorf("unknown policy %q", name)
}

// recommended is the behavior `adapter recommend` gives for a start-up
// time, as the bench's recommended policies use it.
func recommended(startup time.Duration, minR, maxR int) offlinereplay.Behavior {
	rec := recommend.Recommend(recommend.Workload{Startup: []time.Duration{startup}, GPUsPerPod: 1, GPUsPerNode: 8}, recommend.DefaultAutoscaler())
	b := offlinereplay.Behavior{MinReplicas: minR, MaxReplicas: maxR}
	up, down := rec.Behavior.ScaleUp, rec.Behavior.ScaleDown
	b.UpWindow = time.Duration(*up.StabilizationWindowSeconds) * time.Second
	b.DownWindow = time.Duration(*down.StabilizationWindowSeconds) * time.Second
	b.UpPods, b.UpPercent, b.UpPeriod = rates(up.Policies)
	b.DownPods, b.DownPercent, b.DownPeriod = rates(down.Policies)
	return b
}

// rates reads an HPA's rate policies: pods and percent per period.
func rates(policies []autoscalingv2.HPAScalingPolicy) (pods, percent int, period time.Duration) {
	for _, p := range policies {
		period = time.Duration(p.PeriodSeconds) * time.Second
		if p.Type == autoscalingv2.PodsScalingPolicy {
			pods = int(p.Value)
		} else {
			percent = int(p.Value)
		}
	}
	return pods, percent, period
}

// podsAverage is a Pods metric at an averageValue (inference_requests_running
// at 16), with the controller's handling of pods without a value: when
// scaling up they count as 0, so the ratio is taken over them too.
type podsAverage struct{ target float64 }

func (p podsAverage) Recommend(v offlinereplay.View) (int, bool) {
	sum, n, missing := 0.0, 0, 0
	for _, pod := range v.Pods {
		if pod.Ready && pod.Data {
			sum += float64(pod.Running)
			n++
		} else {
			missing++
		}
	}
	if n == 0 {
		return 0, false
	}
	ratio := sum / float64(n) / p.target
	if ratio > 1 && missing > 0 {
		if ratio = sum / float64(n+missing) / p.target; ratio <= 1+hpaTolerance {
			return v.Spec, true
		}
		return int(math.Ceil(ratio * float64(n+missing))), true
	}
	if math.Abs(ratio-1) <= hpaTolerance {
		return v.Spec, true
	}
	return int(math.Ceil(ratio * float64(n))), true
}

// capacityPolicy is an Object metric at value 1 on the adapter's capacity
// estimator, fed what the adapter reads of each pod.
type capacityPolicy struct {
	est *capacity.Estimator
	// parts, when set, is called with every estimate.
	parts func(now time.Time, e capacity.Estimate)
}

func (c *capacityPolicy) Recommend(v offlinereplay.View) (int, bool) {
	pods := make([]capacity.Pod, 0, len(v.Pods))
	for _, p := range v.Pods {
		cp := capacity.Pod{Ready: p.Ready, Loading: p.Loading}
		if p.Ready {
			cp.Startup = p.ReadyAt.Sub(p.Created)
			if p.Data {
				cp.Data, cp.Running, cp.Waiting, cp.KVPercent = true, float64(p.Running), float64(p.Waiting), 100*p.KVUsage
				cp.UID, cp.Prefill = p.Name, p.Prefill
			}
		}
		pods = append(pods, cp)
	}
	est, err := c.est.Estimate(capacity.Key{Namespace: "replay", Target: "deployment/llm"}, v.Now, pods)
	if err != nil {
		return 0, false
	}
	if c.parts != nil {
		c.parts(v.Now, est)
	}
	if math.Abs(est.Utilization-1) <= hpaTolerance {
		return v.Spec, true
	}
	return int(math.Ceil(est.Utilization * float64(v.Ready()))), true
}

// scheduled asks for n replicas from at on: a policy that knows the
// future, to bound what any policy could do.
type scheduled struct {
	at time.Duration
	n  int
}

func (s scheduled) Recommend(v offlinereplay.View) (int, bool) {
	if v.Now.Sub(time.Unix(0, 0)) >= s.at {
		return s.n, true
	}
	return v.Spec, true
}
