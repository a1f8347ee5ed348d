package gather

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
)

// An exporter speaks for the GPUs of its own node, and for the pods the
// API server places there: the namespace and pod labels of its series are
// claims, checked against the pod informer before anything is stored under
// them. A genuine exporter's claims fail only while the informer and the
// kubelet disagree (a pod just created or deleted); a hostile or broken
// one's fail every scrape, and are counted. See docs/trust-model.md.

// labelPodUID is the pod UID label of dcgm-exporter
// (DCGM_EXPORTER_KUBERNETES_ENABLE_POD_UID). The gpuscale exporter does not
// serve one: the kubelet's pod-resources API does not say a pod's UID.
const labelPodUID = "pod_uid"

// Why a pod's GPU values from an exporter were not stored, as indexes of
// trustReasons.
const (
	// rejectUnknownPod: the informer has no such pod.
	rejectUnknownPod = iota
	// rejectForeignPod: the pod runs on another node than the exporter's.
	rejectForeignPod
	// rejectPodUIDMismatch: the exporter labelled the pod with another UID
	// (a pod of the same name that is gone, or a lie).
	rejectPodUIDMismatch
)

// trustReasons are the values of the rejections' reason label.
var trustReasons = [...]string{rejectUnknownPod: "unknown_pod", rejectForeignPod: "foreign_pod", rejectPodUIDMismatch: "pod_uid_mismatch"}

var rejectedAttributionsDesc = prometheus.NewDesc("gpuscale_adapter_gpu_attributions_rejected_total",
	"Pods an exporter attributed GPU series to whose values were not stored, by exporter pod and reason: the API server does not know the pod (unknown_pod), places it on another node (foreign_pod), or gives it another UID (pod_uid_mismatch). One per pod and scrape.",
	[]string{"namespace", "pod", "reason"}, nil)

// placement is where the API server says each pod runs, as the pod
// informer listed them at the start of a cycle.
type placement map[store.Key]*corev1.Pod

// newPlacement indexes pods by name, nil when no target is an exporter.
func newPlacement(pods []*corev1.Pod, targets []discovery.Target) *placement {
	for _, t := range targets {
		if t.Kind == discovery.KindExporter {
			m := make(placement, len(pods))
			for _, p := range pods {
				m[store.Key{Namespace: p.Namespace, Name: p.Name}] = p
			}
			return &m
		}
	}
	return nil
}

// admitGPU removes from pods, the per-pod GPU samples of one scrape of the
// exporter tt, those of pods the exporter may not speak for, and counts
// each by reason. The node's sample is the exporter's to give and is left
// alone.
func (g *Gatherer) admitGPU(tt *target, families map[string]*dto.MetricFamily, pods map[store.Key]store.Sample) {
	var placed placement
	if p := g.placed.Load(); p != nil {
		placed = *p
	}
	var uids map[store.Key]string
	for k := range pods {
		reason := -1
		switch p := placed[k]; {
		case p == nil:
			reason = rejectUnknownPod
		case tt.Node == "" || p.Spec.NodeName != tt.Node:
			reason = rejectForeignPod
		default:
			if uids == nil {
				uids = claimedUIDs(families)
			}
			if uid, ok := uids[k]; ok && uid != string(p.UID) {
				reason = rejectPodUIDMismatch
			}
		}
		if reason < 0 {
			continue
		}
		delete(pods, k)
		tt.refused[reason].Add(1)
		g.log.Debug("exporter series not stored", "exporter", tt.Key(), "node", tt.Node,
			"claimed", slog.GroupValue(slog.String("namespace", k.Namespace), slog.String("pod", k.Name)), "reason", trustReasons[reason])
	}
}

// conflictingUIDs stands for a pod labelled with two UIDs in one scrape,
// which matches no pod.
const conflictingUIDs = "\x00conflicting"

// claimedUIDs returns the pod UID the exporter's series label each pod
// with, where they do.
func claimedUIDs(families map[string]*dto.MetricFamily) map[store.Key]string {
	uids := map[store.Key]string{}
	for _, name := range ingest.GPUFamilies() {
		for _, m := range families[name].GetMetric() {
			var k store.Key
			var uid string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case dcgm.LabelNamespace:
					k.Namespace = l.GetValue()
				case dcgm.LabelPod:
					k.Name = l.GetValue()
				case labelPodUID:
					uid = l.GetValue()
				}
			}
			if uid == "" || k.Namespace == "" || k.Name == "" {
				continue
			}
			if prev, ok := uids[k]; ok && prev != uid {
				uid = conflictingUIDs
			}
			uids[k] = uid
		}
	}
	return uids
}

// trustCollector reports the rejected attributions of each exporter from
// the gatherer's record of its targets, like targetCollector: a vanished
// exporter's series go with it.
type trustCollector struct{ g *Gatherer }

func (c trustCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rejectedAttributionsDesc }

func (c trustCollector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.Lock()
	defer c.g.mu.Unlock()
	for _, t := range c.g.known {
		for i := range t.refused {
			if n := t.refused[i].Load(); n > 0 {
				ch <- prometheus.MustNewConstMetric(rejectedAttributionsDesc, prometheus.CounterValue, float64(n), t.Namespace, t.Pod, trustReasons[i])
			}
		}
	}
}
