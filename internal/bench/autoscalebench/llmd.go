package autoscalebench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// The reference policy: llm-d's SLO-aware autoscaling control law
// (llm-d.ai, "SLO-Aware Autoscaling with KEDA — the control law"),
// implemented from its public description. Its saturation signal is the
// pool's TTFT p90 over the SLO, an idle pool reading 0, clamped at
// llmdClamp and averaged over llmdSmoothing; the replicas grow while it is
// above llmdUp and shrink while it is below llmdDown, with replicas still
// warming up credited as capacity already on its way. KEDA then drives a
// standard HPA, whose default scale-down stabilization (300 s) applies.
const (
	llmdClamp     = 2.0
	llmdSmoothing = 45 * time.Second
	llmdUp        = 0.55
	llmdDown      = 0.40
	// llmdEvery is how often the signal is evaluated: the recording
	// rules' and the HPA's 15 s.
	llmdEvery = 15 * time.Second
	// llmdStabilization is the HPA's default scale-down window.
	llmdStabilization = 300 * time.Second
)

// LLMDLaw is the control law's state: the signal's recent samples and the
// recommendations of the scale-down window, in trace time.
type LLMDLaw struct {
	signal []timed
	recs   []timed
}

type timed struct {
	at time.Duration
	v  float64
}

// Step takes the raw signal at trace time at (ttftP90 over the SLO; 0 with
// no traffic) and the workload's replicas, ready ones and all, and
// returns the replicas to set.
func (l *LLMDLaw) Step(at time.Duration, raw float64, replicas, ready, minR, maxR int) int {
	l.signal = append(l.signal, timed{at, min(raw, llmdClamp)})
	l.signal = keepSince(l.signal, at-llmdSmoothing)
	s := 0.0
	for _, x := range l.signal {
		s += x.v
	}
	s /= float64(len(l.signal))

	want := replicas
	switch {
	case s > llmdUp:
		// The ready replicas run at s; enough of them run at the
		// threshold. Warming replicas are part of replicas already,
		// so they are not asked for twice.
		want = max(replicas, int(math.Ceil(float64(ready)*s/llmdUp)))
	case s < llmdDown && ready == replicas:
		// Shrink only with nothing warming: a replica on its way was
		// asked for by a saturation the ready ones still show.
		want = max(1, int(math.Ceil(float64(ready)*s/llmdDown)))
	}
	want = min(max(want, minR), maxR)
	l.recs = append(l.recs, timed{at, float64(want)})
	l.recs = keepSince(l.recs, at-llmdStabilization)
	// The HPA applies a scale-down only as far as the highest
	// recommendation of its window allows.
	out := want
	if want < replicas {
		for _, r := range l.recs {
			out = max(out, int(r.v))
		}
		out = min(out, replicas)
	}
	return out
}

func keepSince(xs []timed, from time.Duration) []timed {
	i := 0
	for i < len(xs)-1 && xs[i].at < from {
		i++
	}
	return xs[i:]
}

// runLLMD drives r's Deployment by the control law every llmdEvery of
// trace time until ctx is done.
func runLLMD(ctx context.Context, env *devenv.Env, p *Plan, r *policyRun, clock *Clock, start time.Time) {
	var law LLMDLaw
	t := time.NewTicker(p.wall(llmdEvery))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := llmdSync(ctx, env, p, r, &law, clock.Now().Sub(start)); err != nil && ctx.Err() == nil {
			p.Log.Warn("llm-d reference: sync failed", "err", err)
		}
	}
}

func llmdSync(ctx context.Context, env *devenv.Env, p *Plan, r *policyRun, law *LLMDLaw, at time.Duration) error {
	raw, err := deploymentTTFTP90(ctx, env, r.namespace)
	if err != nil {
		return err
	}
	raw /= p.SLO.Seconds()
	replicas, ready, _, err := count(ctx, env, r.namespace)
	if err != nil {
		return err
	}
	want := law.Step(at, raw, replicas, ready, 1, p.MaxReplicas)
	if want == replicas {
		return nil
	}
	deploys := env.Cluster.Client().AppsV1().Deployments(r.namespace)
	scale, err := deploys.GetScale(ctx, workloadName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	scale.Spec.Replicas = int32(want)
	_, err = deploys.UpdateScale(ctx, workloadName, scale, metav1.UpdateOptions{})
	return err
}

// deploymentTTFTP90 reads the Deployment's TTFT p90 as the HPA would. No
// value (no request in the window) reads 0, as llm-d's idle pool does.
func deploymentTTFTP90(ctx context.Context, env *devenv.Env, ns string) (float64, error) {
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/" + workloadName + "/" + provider.TTFTP90
	raw, err := env.Cluster.Client().Discovery().RESTClient().Get().AbsPath(path).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var list cmv1beta2.MetricValueList
	if err := json.Unmarshal(raw, &list); err != nil {
		return 0, fmt.Errorf("TTFT p90 of %s: %w", ns, err)
	}
	if len(list.Items) != 1 {
		return 0, fmt.Errorf("TTFT p90 of %s: %d items", ns, len(list.Items))
	}
	return list.Items[0].Value.AsApproximateFloat64(), nil
}
