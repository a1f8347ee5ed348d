package provider

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// groupValues attributes a group's GPU signals to the group: the value of
// each LeaderWorkerSet leader among pods becomes that of its group's Ready
// pods together (by the metric's rule: utilizations averaged, memory and
// power summed). An HPA that targets a LeaderWorkerSet reads its leaders
// only (the scale subresource's selector), and a leader's own GPUs are
// only part of its replica's. Its inference signals need nothing: the
// leader's endpoint serves the group's requests. vals is aligned with
// pods and updated in place.
func (p *Provider) groupValues(ctx context.Context, pods []*corev1.Pod, m Metric, vals []Value, sel labels.Selector) error {
	if m.Source != signal.SourceGPU {
		return nil
	}
	for i, pod := range pods {
		if !podgroup.IsLeader(pod) {
			continue
		}
		g, _ := podgroup.Of(pod)
		members, err := p.cfg.Pods.Pods(g.Namespace).List(g.Selector())
		if err != nil {
			return err
		}
		v, ok, err := p.cfg.Values.Workload(ctx, g.Namespace, readyPods(members), m, sel)
		if err != nil {
			return err
		}
		if !ok {
			v = Value{}
		}
		vals[i] = v
	}
	return nil
}
