package gather

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// The exporter DaemonSet of these tests.
const (
	exporterNamespace = "gpuscale"
	exporterDaemonSet = "gpuscale-exporter"
)

var exporterLabels = map[string]string{"app": "exporter"}

// exporterDiscovery finds the exporter DaemonSet's pods, serving on port.
func exporterDiscovery(port int) discovery.Config {
	return discovery.Config{ExporterSelector: labels.SelectorFromSet(exporterLabels), ExporterNamespace: exporterNamespace,
		ExporterDaemonSet: exporterDaemonSet, ExporterPort: port}
}

// exporterPod is a pod of the exporter DaemonSet on node.
func exporterPod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: exporterNamespace, Name: name, Labels: exporterLabels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: exporterDaemonSet, UID: "ds", Controller: ptr.To(true)}}},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

// placedPod is a pod the API server has on node, not scraped itself.
func placedPod(ns, name, node, uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.9"}}
}

// nodeAExposition is what the exporter on node-a serves: genuine series
// (a time-sliced GPU shared by two pods, one labelled with its UID; two
// MIG instances of one GPU held by two pods), and series naming pods it
// may not speak for. Every series claims Hostname node-b, which must not
// matter: an exporter speaks for the node it runs on.
const nodeAExposition = `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",Hostname="node-b",namespace="ml",pod="a",container="c",pod_uid="uid-a"} 60
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",Hostname="node-b",namespace="ml",pod="b",container="c"} 60
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",Hostname="node-b"} 30
DCGM_FI_DEV_GPU_UTIL{gpu="2",UUID="GPU-2",Hostname="node-b",namespace="other",pod="victim",container="c"} 0
DCGM_FI_DEV_GPU_UTIL{gpu="3",UUID="GPU-3",Hostname="node-b",namespace="ml",pod="ghost",container="c"} 0
DCGM_FI_DEV_GPU_UTIL{gpu="4",UUID="GPU-4",Hostname="node-b",namespace="ml",pod="e",container="c",pod_uid="uid-of-another-e"} 0
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb",Hostname="node-b",namespace="ml",pod="c",container="c"} 1000
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="node-b",namespace="ml",pod="d",container="c"} 2000
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-1",GPU_I_ID="1",GPU_I_PROFILE="1g.10gb",Hostname="node-b",namespace="ml",pod="c",container="c"} 9000
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-1",GPU_I_ID="2",GPU_I_PROFILE="1g.10gb",Hostname="node-b",namespace="ml",pod="d",container="c"} 8000
`

// spoofExposition is what a tenant's pod wearing the exporter's labels
// serves: everyone's GPUs idle.
const spoofExposition = `# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-9",namespace="other",pod="victim",container="c"} 0
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-8",namespace="ml",pod="a",container="c"} 0
`

// TestExporterTrust: an exporter's GPU values are stored only for pods the
// API server places on its node (with the UID it reports, when it reports
// one), and for its own node; the rest is counted by exporter and reason.
// A tenant's pod labelled like the exporter is not scraped as one at all.
// All of it holds as well with the pods slimmed by KeepPodFields, as the
// adapter's informer cache holds them.
func TestExporterTrust(t *testing.T) {
	t.Run("full pods", func(t *testing.T) { exporterTrust(t, false) })
	t.Run("slim pods", func(t *testing.T) { exporterTrust(t, true) })
}

func exporterTrust(t *testing.T, slim bool) {
	ctx := context.Background()
	// The exporter and the tenant's pod share 127.0.0.1 and, since the
	// exporter port is one flag, a port: they differ by path.
	mux := http.NewServeMux()
	mux.Handle("/metrics", text(nodeAExposition))
	mux.Handle("/spoof", text(spoofExposition))
	_, port := serve(t, mux)

	tenant := exporterPod("fake-exporter", "node-b")
	tenant.Namespace, tenant.OwnerReferences = "tenant", nil
	tenant.Annotations = map[string]string{discovery.AnnotationScrape: "true", discovery.AnnotationPort: strconv.Itoa(port), discovery.AnnotationPath: "/spoof"}
	pods := podList{
		exporterPod("exporter-a", "node-a"), tenant,
		placedPod("ml", "a", "node-a", "uid-a"), placedPod("ml", "b", "node-a", "uid-b"),
		placedPod("ml", "c", "node-a", "uid-c"), placedPod("ml", "d", "node-a", "uid-d"),
		placedPod("ml", "e", "node-a", "uid-e"), placedPod("other", "victim", "node-b", "uid-v"),
	}
	if slim {
		for i, p := range pods {
			pods[i] = podslim.Slim(p, KeepPodFields)
		}
	}
	st := store.New(30)
	g, err := New(Config{Pods: pods, Scraper: scrape.New(scrape.Config{Timeout: 2 * time.Second}), Store: st,
		Interval: time.Second, Registerer: prometheus.NewRegistry(), Discovery: exporterDiscovery(port)})
	if err != nil {
		t.Fatal(err)
	}
	const cycles = 3
	for range cycles {
		g.Cycle(ctx)
	}
	now := time.Now()

	gpu := func(ns, name string, m signal.Signal) (float64, bool) {
		s, ok := st.Latest(store.Key{Namespace: ns, Name: name}, signal.SourceGPU, now, time.Hour)
		if !ok {
			return 0, false
		}
		return s.Get(m)
	}
	for _, tc := range []struct {
		ns, pod string
		metric  signal.Signal
		want    float64
	}{
		{"ml", "a", signal.GPUUtilization, 60},                   // time-sliced, UID matches
		{"ml", "b", signal.GPUUtilization, 60},                   // time-sliced, no UID label
		{"ml", "c", signal.GPUMemoryUsedBytes, 1000 * (1 << 20)}, // MIG instance
		{"ml", "d", signal.GPUMemoryUsedBytes, 2000 * (1 << 20)}, // MIG instance of the same GPU
	} {
		if v, ok := gpu(tc.ns, tc.pod, tc.metric); !ok || v != tc.want {
			t.Errorf("%s/%s %v = %v (ok=%v), want %v", tc.ns, tc.pod, tc.metric, v, ok, tc.want)
		}
	}
	for _, k := range []store.Key{{Namespace: "other", Name: "victim"}, {Namespace: "ml", Name: "ghost"}, {Namespace: "ml", Name: "e"}} {
		if s, ok := st.Latest(k, signal.SourceGPU, now, time.Hour); ok {
			t.Errorf("%s/%s has a GPU sample %+v: it is not on node-a, or not under the UID the exporter gave", k.Namespace, k.Name, s)
		}
	}
	// node-a: the mean of its five whole GPUs, those of refused pods too:
	// the exporter speaks for its node's devices.
	if s, ok := st.LatestNode("node-a", now, time.Hour); !ok {
		t.Error("node-a has no sample")
	} else if v, _ := s.Get(signal.GPUUtilization); v != 18 {
		t.Errorf("node-a utilization %v, want 18", v)
	}
	if s, ok := st.LatestNode("node-b", now, time.Hour); ok {
		t.Errorf("node-b has a sample %+v: no exporter runs there, whatever Hostname labels or tenant pods say", s)
	}

	for reason, want := range map[string]float64{"foreign_pod": cycles, "unknown_pod": cycles, "pod_uid_mismatch": cycles} {
		if got := rejected(t, g, exporterNamespace, "exporter-a", reason); got != want {
			t.Errorf("rejected{exporter-a,%s} = %v, want %v", reason, got, want)
		}
	}
	// The tenant's pod was scraped as what it is: an inference target
	// serving no inference dialect.
	if n := scrapeErrorsIn(t, g, "tenant", "fake-exporter", reasonUnknownDialect); n != cycles {
		t.Errorf("tenant pod: unknown_dialect errors %v, want %v", n, cycles)
	}
	if v := testutil.ToFloat64(g.m.misconfigured); v != 1 {
		t.Errorf("misconfigured %v, want 1 (the tenant pod wearing the exporter's labels)", v)
	}
}

// TestAdmitGPUConflictingUIDs: a pod labelled with two UIDs in one scrape
// matches neither.
func TestAdmitGPUConflictingUIDs(t *testing.T) {
	_, port := serve(t, text(`# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",namespace="ml",pod="a",pod_uid="uid-a"} 60
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",namespace="ml",pod="a",pod_uid="uid-x"} 0
`))
	st := store.New(30)
	g, err := New(Config{Pods: podList{exporterPod("exporter-a", "node-a"), placedPod("ml", "a", "node-a", "uid-a")},
		Scraper: scrape.New(scrape.Config{Timeout: 2 * time.Second}), Store: st, Interval: time.Second,
		Registerer: prometheus.NewRegistry(), Discovery: exporterDiscovery(port)})
	if err != nil {
		t.Fatal(err)
	}
	g.Cycle(context.Background())
	if s, ok := st.Latest(store.Key{Namespace: "ml", Name: "a"}, signal.SourceGPU, time.Now(), time.Hour); ok {
		t.Errorf("pod with two UIDs has a sample %+v", s)
	}
	if got := rejected(t, g, exporterNamespace, "exporter-a", "pod_uid_mismatch"); got != 1 {
		t.Errorf("pod_uid_mismatch = %v, want 1", got)
	}
}

// TestInferenceSpeaksForItself: namespace and pod labels in an inference
// server's exposition do not redirect its values to another pod.
func TestInferenceSpeaksForItself(t *testing.T) {
	_, victimPort := serve(t, text("# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"m\"} 3\n"))
	_, attackerPort := serve(t, text("# TYPE vllm:num_requests_waiting gauge\n"+
		"vllm:num_requests_waiting{model_name=\"m\",namespace=\"ml\",pod=\"victim\",exported_namespace=\"ml\",exported_pod=\"victim\"} 99\n"))
	attacker := annotatedPod("attacker", attackerPort)
	attacker.Namespace = "tenant"
	st := store.New(30)
	g, err := New(Config{Pods: podList{annotatedPod("victim", victimPort), attacker},
		Scraper: scrape.New(scrape.Config{Timeout: 2 * time.Second}), Store: st, Interval: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		g.Cycle(context.Background())
	}
	for _, tc := range []struct {
		ns, pod string
		want    float64
	}{{"ml", "victim", 3}, {"tenant", "attacker", 99}} {
		s, ok := st.Latest(store.Key{Namespace: tc.ns, Name: tc.pod}, signal.SourceInference, time.Now(), time.Hour)
		if v, _ := s.Get(signal.QueueDepth); !ok || v != tc.want {
			t.Errorf("%s/%s queue depth %v (ok=%v), want %v", tc.ns, tc.pod, v, ok, tc.want)
		}
	}
}

// rejected reads gpuscale_adapter_gpu_attributions_rejected_total of one
// exporter and reason as a scrape of the adapter would.
func rejected(t *testing.T, g *Gatherer, ns, pod, reason string) float64 {
	t.Helper()
	return counterOf(t, trustCollector{g}, "gpuscale_adapter_gpu_attributions_rejected_total", ns, pod, reason)
}

func scrapeErrorsIn(t *testing.T, g *Gatherer, ns, pod, reason string) float64 {
	t.Helper()
	return counterOf(t, targetCollector{g}, "gpuscale_adapter_scrape_errors_total", ns, pod, reason)
}

// counterOf reads counter name of one target and reason from what c
// collects, as a scrape of the adapter would.
func counterOf(t *testing.T, c prometheus.Collector, name, ns, pod, reason string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range fams {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			lbl := map[string]string{}
			for _, lp := range m.GetLabel() {
				lbl[lp.GetName()] = lp.GetValue()
			}
			if lbl["namespace"] == ns && lbl["pod"] == pod && lbl["reason"] == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
