package simworld

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
)

// Every test uses its own pod IPs (podIP) so that a server one test leaves
// behind cannot answer another's requests.

func TestInferenceServersSpeakTheirPodsDialect(t *testing.T) {
	tests := []struct {
		name, ip string
		opts     []podOpt
		port     int32
		family   string
		label    [2]string // a label every series of family carries
	}{
		{name: "default", ip: podIP(1, 1), family: "vllm:num_requests_waiting",
			label: [2]string{"model_name", "meta-llama/Llama-3.1-8B-Instruct"}},
		{name: "vllm-model", ip: podIP(1, 2), opts: []podOpt{withEnv("SIM_MODEL", "Qwen/Qwen2.5-7B")},
			family: "vllm:num_requests_running", label: [2]string{"model_name", "Qwen/Qwen2.5-7B"}},
		{name: "sglang", ip: podIP(1, 3), opts: []podOpt{withEnv("SIM_DIALECT", "sglang")},
			family: "sglang:num_queue_reqs"},
		{name: "tgi", ip: podIP(1, 4), opts: []podOpt{withEnv("SIM_DIALECT", "tgi")}, family: "tgi_queue_size"},
		{name: "triton-port", ip: podIP(1, 5), opts: []podOpt{withEnv("SIM_DIALECT", "triton")}, port: 8002,
			family: "nv_inference_pending_request_count"},
	}
	objs := []k8sruntime.Object{node("n1", 8)}
	for _, tc := range tests {
		p := pod("llm", tc.name, "n1", tc.ip, InferenceImage, tc.opts...)
		if tc.port != 0 {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: tc.port}}
		}
		objs = append(objs, p)
	}
	tw := startWorld(t, objs...)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			port := cmp.Or(int(tc.port), 8000)
			url := fmt.Sprintf("http://%s/metrics", net.JoinHostPort(tc.ip, fmt.Sprint(port)))
			eventually(t, 10*time.Second, "scrape "+url, func() error {
				mfs, err := scrape(url)
				if err != nil {
					return err
				}
				mf := mfs[tc.family]
				if mf == nil || len(mf.GetMetric()) == 0 {
					return fmt.Errorf("no %s in the exposition", tc.family)
				}
				if tc.label[0] != "" {
					if got := labelsOf(mf.GetMetric()[0])[tc.label[0]]; got != tc.label[1] {
						return fmt.Errorf("%s label %s = %q, want %q", tc.family, tc.label[0], got, tc.label[1])
					}
				}
				return nil
			})
			if tw.Server("llm", tc.name) == nil {
				t.Errorf("Server(llm, %s) = nil while it serves", tc.name)
			}
		})
	}
}

func TestExporterAttributesGPUsToPods(t *testing.T) {
	tw := startWorld(t,
		node("n2", 4),
		pod("kube-system", "exporter-n2", "n2", podIP(2, 1), ExporterImage),
		// b was created first, so it gets GPU 0 although a sorts first.
		pod("llm", "a", "n2", podIP(2, 2), InferenceImage, withGPUs(1), createdAt(2)),
		pod("llm", "b", "n2", podIP(2, 3), InferenceImage, withGPUs(2), createdAt(1)),
	)
	want := map[string]string{"0": "llm/b", "1": "llm/b", "2": "llm/a"}
	eventually(t, 10*time.Second, "pods on the exporter's GPUs", func() error {
		values, pods, err := gpuSeries("http://"+podIP(2, 1)+":9400/metrics", "DCGM_FI_DEV_GPU_UTIL")
		if err != nil {
			return err
		}
		if len(values) != 4 {
			return fmt.Errorf("%d GPUs, want the node's 4", len(values))
		}
		if fmt.Sprint(pods) != fmt.Sprint(want) {
			return fmt.Errorf("pods by GPU %v, want %v", pods, want)
		}
		return nil
	})

	// What the exporter read is what the node's kubelet socket says.
	conn, err := grpc.NewClient("unix://"+tw.PodResourcesSocket("n2"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := podresourcesv1.NewPodResourcesListerClient(conn).List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	got := map[string][]string{}
	for _, p := range resp.GetPodResources() {
		var ids []string
		for _, c := range p.GetContainers() {
			for _, d := range c.GetDevices() {
				if d.GetResourceName() != GPUResource {
					t.Errorf("pod %s: resource %q, want %q", p.GetName(), d.GetResourceName(), GPUResource)
				}
				ids = append(ids, d.GetDeviceIds()...)
			}
		}
		got[p.GetNamespace()+"/"+p.GetName()] = ids
	}
	wantIDs := map[string][]string{
		"kube-system/exporter-n2": nil,
		"llm/a":                   {sim.GPUUUID("n2", 2)},
		"llm/b":                   {sim.GPUUUID("n2", 0), sim.GPUUUID("n2", 1)},
	}
	if fmt.Sprint(got) != fmt.Sprint(wantIDs) {
		t.Errorf("List devices %v, want %v", got, wantIDs)
	}
}

func TestSetRateSpreadsOverReadyServingPods(t *testing.T) {
	app := withLabels("app", "chat")
	tw := startWorld(t,
		node("n3", 8),
		pod("llm", "a", "n3", podIP(3, 1), InferenceImage, app),
		pod("llm", "b", "n3", podIP(3, 2), InferenceImage, app),
		pod("llm", "other", "n3", podIP(3, 3), InferenceImage, withLabels("app", "other")),
		pod("batch", "same-labels-elsewhere", "n3", podIP(3, 4), InferenceImage, app),
	)
	rates := func(want map[string]float64) func() error {
		return func() error {
			for name, rate := range want {
				ns, podName := "llm", name
				if name == "same-labels-elsewhere" {
					ns = "batch"
				}
				s := tw.Server(ns, podName)
				if s == nil {
					return fmt.Errorf("%s has no server", name)
				}
				if got := s.Rate(); got != rate {
					return fmt.Errorf("%s rate %v, want %v", name, got, rate)
				}
			}
			return nil
		}
	}
	eventually(t, 10*time.Second, "servers up", rates(map[string]float64{"a": 0, "b": 0, "other": 0, "same-labels-elsewhere": 0}))

	chat := labels.SelectorFromSet(labels.Set{"app": "chat"})
	tw.SetRate("llm", chat, 40)
	eventually(t, 5*time.Second, "even split", rates(map[string]float64{"a": 20, "b": 20, "other": 0, "same-labels-elsewhere": 0}))

	tw.setReady(t, "llm", "b", false)
	eventually(t, 5*time.Second, "b unready", rates(map[string]float64{"a": 40, "b": 0}))

	tw.setReady(t, "llm", "b", true)
	eventually(t, 5*time.Second, "b ready again", rates(map[string]float64{"a": 20, "b": 20}))

	tw.SetRate("llm", chat, 10)
	eventually(t, 5*time.Second, "rate replaced", rates(map[string]float64{"a": 5, "b": 5}))

	tw.StopServing("llm", "a")
	eventually(t, 5*time.Second, "a stopped serving", rates(map[string]float64{"b": 10}))
}

func TestGPUUtilizationFollowsWork(t *testing.T) {
	tw := startWorld(t,
		node("n4", 3),
		pod("kube-system", "exporter-n4", "n4", podIP(4, 1), ExporterImage),
		pod("llm", "busy", "n4", podIP(4, 2), InferenceImage, withGPUs(1), createdAt(1), withLabels("app", "busy")),
		pod("llm", "quiet", "n4", podIP(4, 3), InferenceImage, withGPUs(1), createdAt(2)),
	)
	url := "http://" + podIP(4, 1) + ":9400/metrics"
	// The default profile serves about 16 requests/s; 12 keeps its batch
	// non-empty nearly all the time without a queue.
	tw.SetRate("llm", labels.SelectorFromSet(labels.Set{"app": "busy"}), 12)
	eventually(t, 10*time.Second, "busy pod's GPU utilization", func() error {
		util, pods, err := gpuSeries(url, "DCGM_FI_DEV_GPU_UTIL")
		if err != nil {
			return err
		}
		if pods["0"] != "llm/busy" || util["0"] <= 50 {
			return fmt.Errorf("GPU 0 held by %q at %v%%, want llm/busy above 50%%", pods["0"], util["0"])
		}
		if pods["1"] != "llm/quiet" || util["1"] != 0 || util["2"] != 0 {
			return fmt.Errorf("idle GPUs at %v%% (GPU 1, %q) and %v%% (GPU 2), want 0", util["1"], pods["1"], util["2"])
		}
		return nil
	})
	mem, _, err := gpuSeries(url, "DCGM_FI_DEV_FB_USED")
	if err != nil {
		t.Fatal(err)
	}
	if mem["0"] < weightsMiB || mem["1"] < weightsMiB {
		t.Errorf("framebuffer used %v, want the model's %v MiB or more on GPUs 0 and 1", mem, weightsMiB)
	}

	// A server that dies leaves its GPU idle, and a deleted pod frees its
	// memory too.
	tw.StopServing("llm", "busy")
	if err := tw.client.CoreV1().Pods("llm").Delete(context.Background(), "quiet", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "GPUs idle", func() error {
		util, pods, err := gpuSeries(url, "DCGM_FI_DEV_GPU_UTIL")
		if err != nil {
			return err
		}
		mem, _, err := gpuSeries(url, "DCGM_FI_DEV_FB_USED")
		if err != nil {
			return err
		}
		if util["0"] != 0 || pods["0"] != "llm/busy" {
			return fmt.Errorf("GPU 0 at %v%% held by %q, want 0%% still held by llm/busy", util["0"], pods["0"])
		}
		if pods["1"] != "" || mem["1"] != 0 {
			return fmt.Errorf("GPU 1 held by %q with %v MiB used, want free and empty", pods["1"], mem["1"])
		}
		return nil
	})
}

func TestDeletedPodStopsServing(t *testing.T) {
	tw := startWorld(t, node("n5", 8), pod("llm", "a", "n5", podIP(5, 1), InferenceImage))
	url := "http://" + podIP(5, 1) + ":8000/healthz"
	eventually(t, 10*time.Second, "server up", func() error { _, err := httpClient.Get(url); return err })
	if err := tw.client.CoreV1().Pods("llm").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "server gone", func() error { return refused(url) })
	if tw.Server("llm", "a") != nil {
		t.Error("Server(llm, a) != nil after the pod was deleted")
	}

	// A new pod takes the address (kwok reuses IPs) and serves again.
	if _, err := tw.client.CoreV1().Pods("llm").Create(context.Background(),
		pod("llm", "b", "n5", podIP(5, 1), InferenceImage), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "successor up", func() error { _, err := httpClient.Get(url); return err })
}

func TestFaultInjection(t *testing.T) {
	tw := startWorld(t,
		node("n6", 8),
		pod("kube-system", "exporter-n6", "n6", podIP(6, 1), ExporterImage),
		pod("llm", "a", "n6", podIP(6, 2), InferenceImage),
	)
	metrics := map[string]string{"exporter": "http://" + podIP(6, 1) + ":9400/metrics", "server": "http://" + podIP(6, 2) + ":8000/metrics"}
	for what, url := range metrics {
		eventually(t, 10*time.Second, what+" up", func() error { _, err := scrape(url); return err })
	}

	tw.StopServing("llm", "a")
	if err := refused(metrics["server"]); err != nil {
		t.Errorf("after StopServing: %v", err)
	}
	tw.StopExporter("n6")
	if err := refused(metrics["exporter"]); err != nil {
		t.Errorf("after StopExporter: %v", err)
	}
	// The pods are still there and Ready, but stay down: a new pod's
	// server coming up shows a reconcile since the faults, which would
	// have restarted them.
	if _, err := tw.client.CoreV1().Pods("llm").Create(context.Background(),
		pod("llm", "b", "n6", podIP(6, 3), InferenceImage), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "a new pod served", func() error { _, err := scrape("http://" + podIP(6, 3) + ":8000/metrics"); return err })
	for what, url := range metrics {
		if err := refused(url); err != nil {
			t.Errorf("%s restarted: %v", what, err)
		}
	}
	if p, err := tw.client.CoreV1().Pods("llm").Get(context.Background(), "a", metav1.GetOptions{}); err != nil || !Ready(p) {
		t.Errorf("pod a: ready=%v err=%v, want still ready", err == nil && Ready(p), err)
	}
}

func TestListenFailureIsRetried(t *testing.T) {
	blocker, err := net.Listen("tcp", podIP(7, 1)+":8000")
	if err != nil {
		t.Fatal(err)
	}
	tw := startWorld(t, node("n7", 8), pod("llm", "a", "n7", podIP(7, 1), InferenceImage))
	tw.logged(t, 3, `msg="cannot start inference server; will retry" pod=llm/a`)
	if tw.Server("llm", "a") != nil {
		t.Fatal("a server runs although its address is taken")
	}
	blocker.Close()
	eventually(t, 5*time.Second, "server up once the address is free", func() error {
		_, err := scrape("http://" + podIP(7, 1) + ":8000/metrics")
		return err
	})
}

func TestPodResourcesSocketPath(t *testing.T) {
	w, err := New(Options{Client: kubefake.NewClientset(), Dir: "/tmp/sw"})
	if err != nil {
		t.Fatal(err)
	}
	long := w.PodResourcesSocket(string(slices.Repeat([]byte("n"), 253)))
	if len(long) > 100 {
		t.Errorf("socket path %q is %d bytes, over the unix limit", long, len(long))
	}
	if a, b := w.PodResourcesSocket("n1"), w.PodResourcesSocket("n2"); a == b || a != w.PodResourcesSocket("n1") {
		t.Errorf("sockets n1=%q n2=%q: want distinct and stable", a, b)
	}
}

func TestGPUUUIDIsTheSimBackends(t *testing.T) {
	b, err := sim.New(sim.Options{GPUs: 4, Identity: "node-x"})
	if err != nil {
		t.Fatal(err)
	}
	readings, err := b.Collect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readings {
		if got := sim.GPUUUID("node-x", r.Device.Index); got != r.Device.UUID {
			t.Errorf("GPUUUID(node-x, %d) = %s, backend says %s", r.Device.Index, got, r.Device.UUID)
		}
	}
	if sim.GPUUUID("node-x", 0) == sim.GPUUUID("node-y", 0) {
		t.Error("two nodes share a GPU UUID")
	}
}
