package localcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// e2eEnv runs the tests that start a cluster; `make e2e` sets it, and it is
// the only target that runs this package. They build the binaries when they
// are not cached: a cold build takes about 25 minutes on two cores, so run
// such a test with -timeout 40m.
const e2eEnv = "GPUSCALE_E2E"

// startTestCluster starts a cluster in a temporary folder and stops it when
// the test ends, quoting the component logs if the test failed. Whether it
// runs depends on the environment alone, never on what happens to be cached.
func startTestCluster(t *testing.T) *Cluster {
	t.Helper()
	if os.Getenv(e2eEnv) == "" {
		t.Skipf("starts a cluster: set %s=1 (make e2e), building the binaries first if they are not cached", e2eEnv)
	}
	c, err := Start(t.Context(), Options{
		Dir:    t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, p := range c.procs {
				t.Logf("last lines of %s:\n%s", p.LogPath(), p.LogTail())
			}
		}
		if err := c.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return c
}

func TestClusterSchedulesGPUPods(t *testing.T) {
	c := startTestCluster(t)
	ctx := t.Context()
	tm := c.Timings()
	t.Logf("startup: etcd start to kube-apiserver ready %s, to cluster ready %s", tm.APIServerReady.Round(time.Millisecond), tm.Ready.Round(time.Millisecond))

	for _, name := range []string{"gpu-0", "gpu-1"} {
		if err := c.AddGPUNode(ctx, name, 8); err != nil {
			t.Fatal(err)
		}
	}
	checkGPUNode(t, c, "gpu-0", 8)
	out, err := c.Kubectl(ctx, "get", "nodes", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Fields(string(out)); !slices.Equal(got, []string{"node/gpu-0", "node/gpu-1"}) {
		t.Errorf("kubectl get nodes = %q", out)
	}

	pods := trackPods(ctx, t, c.Client(), "default", "app=gpu-worker")
	deploy := gpuDeployment("gpu-worker", 3)
	if _, err := c.Client().AppsV1().Deployments("default").Create(ctx, deploy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods.waitFor(t, "3 pods Ready", func(s podStates) bool { return s.ready() == 3 })
	podCIDR, err := PodPrefix()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.snapshot() {
		ip, err := netip.ParseAddr(p.pod.Status.PodIP)
		if p.pod.Status.Phase != corev1.PodRunning || err != nil || !podCIDR.Contains(ip) {
			t.Errorf("pod %s: phase %s, IP %q; want Running with an IP in %s", p.pod.Name, p.pod.Status.Phase, p.pod.Status.PodIP, podCIDR)
		}
	}

	// 17 one-GPU pods on two 8-GPU nodes: the scheduler counts the extended
	// resource, so exactly one stays Pending.
	if err := scaleDeployment(ctx, c.Client(), "default", "gpu-worker", 17); err != nil {
		t.Fatal(err)
	}
	pods.waitFor(t, "16 pods Ready and 1 unschedulable", func(s podStates) bool {
		return s.ready() == 16 && s.unschedulable("Insufficient nvidia.com/gpu") == 1
	})
	perNode := map[string]int{}
	for _, p := range pods.snapshot() {
		perNode[p.pod.Spec.NodeName]++
	}
	if perNode["gpu-0"] != 8 || perNode["gpu-1"] != 8 || perNode[""] != 1 {
		t.Errorf("pods per node = %v, want 8 on each node and 1 unscheduled", perNode)
	}
	lat := pods.snapshot().readyLatencies()
	slices.Sort(lat)
	t.Logf("pod scheduled to Ready (as seen by a watch), %d pods: median %s, max %s",
		len(lat), lat[len(lat)/2].Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))

	checkReadyAfter(ctx, t, c)
	checkCertUserUnprivileged(ctx, t, c)
	checkStopLeavesNoProcesses(t, c)
}

// checkReadyAfter: a pod annotated with a ready-after delay runs, with an
// IP, at once, and turns Ready only after the delay, as a model loads.
func checkReadyAfter(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	const delay = 3 * time.Second
	pods := trackPods(ctx, t, c.Client(), "default", "app=loader")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "loader", Labels: map[string]string{"app": "loader"},
			Annotations: map[string]string{ReadyAfterAnnotation: delay.String()}},
		Spec: corev1.PodSpec{
			Containers:  []corev1.Container{{Name: "server", Image: "vllm/vllm-openai:fake"}},
			Tolerations: []corev1.Toleration{GPUToleration()},
		},
	}
	if _, err := c.Client().CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods.waitFor(t, "the loader running with an IP", func(s podStates) bool {
		p := s["loader"].pod
		return p != nil && p.Status.Phase == corev1.PodRunning && p.Status.PodIP != ""
	})
	runningAt := time.Now()
	if s := pods.snapshot()["loader"]; !s.readyAt.IsZero() {
		t.Fatalf("loader Ready as soon as it runs; conditions %v", s.pod.Status.Conditions)
	}
	// A change to the pod while it loads (gpuscale's scale-down controller
	// annotates pods) must not start the load over.
	time.Sleep(delay / 2)
	patch := []byte(`{"metadata":{"annotations":{"controller.kubernetes.io/pod-deletion-cost":"7"}}}`)
	if _, err := c.Client().CoreV1().Pods("default").Patch(ctx, "loader", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	pods.waitFor(t, "the loader Ready", func(s podStates) bool { return s.ready() == 1 })
	// The delay counts from the pod's start time, which the API server
	// keeps to the second, and the watch sees Running a little after: the
	// gap seen is within a second or so of the delay, and a load started
	// over by the patch would show about half a delay more.
	if got := pods.snapshot()["loader"].readyAt.Sub(runningAt); got < delay-1500*time.Millisecond || got > delay+delay/3 {
		t.Errorf("Ready %s after Running, want about %s", got.Round(time.Millisecond), delay)
	}
}

func checkGPUNode(t *testing.T, c *Cluster, name string, gpus int64) {
	t.Helper()
	n, err := c.Client().CoreV1().Nodes().Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := n.Status.Allocatable[GPUResource]; got.Value() != gpus {
		t.Errorf("node %s allocatable GPUs = %s, want %d", name, got.String(), gpus)
	}
	if got := n.Status.Allocatable[corev1.ResourceCPU]; got.Value() != 64 {
		t.Errorf("node %s allocatable CPU = %s, want 64 (kwok must keep the status set on create)", name, got.String())
	}
	if n.Labels["nvidia.com/gpu.product"] != GPUProduct || n.Labels["nvidia.com/gpu.count"] != fmt.Sprint(gpus) {
		t.Errorf("node %s labels = %v", name, n.Labels)
	}
	if !slices.ContainsFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == GPUTaintKey }) {
		t.Errorf("node %s taints = %v, want %s", name, n.Spec.Taints, GPUTaintKey)
	}
}

// checkCertUserUnprivileged checks that a Kubeconfig user authenticates but
// has no rights until RBAC grants them.
func checkCertUserUnprivileged(ctx context.Context, t *testing.T, c *Cluster) {
	t.Helper()
	path, err := c.Kubeconfig("gpuscale-adapter")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("unbound certificate user listing pods: err = %v, want Forbidden", err)
	}
	if !strings.Contains(fmt.Sprint(err), `"gpuscale-adapter"`) {
		t.Errorf("Forbidden error does not name the certificate user: %v", err)
	}
}

func checkStopLeavesNoProcesses(t *testing.T, c *Cluster) {
	t.Helper()
	if err := c.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	out, err := exec.Command("pgrep", "-a", "-f", c.Dir()).Output()
	if ee, ok := errors.AsType[*exec.ExitError](err); !ok || ee.ExitCode() != 1 {
		t.Errorf("processes left after Stop (pgrep: %v):\n%s", err, out)
	}
}

func gpuDeployment(name string, replicas int32) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	gpu := corev1.ResourceList{GPUResource: resource.MustParse("1")}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{
						Name: "server", Image: "vllm/vllm-openai:fake",
						Resources: corev1.ResourceRequirements{Requests: gpu, Limits: gpu},
					}},
					Tolerations: []corev1.Toleration{GPUToleration()},
				},
			},
		},
	}
}

// scaleDeployment sets a Deployment's replicas through the scale
// subresource, as the HPA controller does. A patch carries no
// resourceVersion, so the controllers' concurrent status updates cannot make
// it conflict.
func scaleDeployment(ctx context.Context, client kubernetes.Interface, ns, name string, replicas int32) error {
	patch := fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, replicas)
	_, err := client.AppsV1().Deployments(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "scale")
	return err
}

// podState is the latest version of a pod and when a watch first saw it
// bound to a node and Ready.
type podState struct {
	pod                  *corev1.Pod
	scheduledAt, readyAt time.Time
}

type podStates map[string]podState

func (s podStates) ready() int {
	n := 0
	for _, p := range s {
		if !p.readyAt.IsZero() {
			n++
		}
	}
	return n
}

func (s podStates) unschedulable(reason string) int {
	n := 0
	for _, p := range s {
		for _, c := range p.pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse &&
				c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, reason) {
				n++
			}
		}
	}
	return n
}

func (s podStates) readyLatencies() []time.Duration {
	var out []time.Duration
	for _, p := range s {
		if !p.readyAt.IsZero() && !p.scheduledAt.IsZero() {
			out = append(out, p.readyAt.Sub(p.scheduledAt))
		}
	}
	return out
}

// podTracker follows pods through a watch, timestamping transitions on
// arrival: the API's condition times have one-second resolution.
type podTracker struct {
	mu   sync.Mutex
	pods podStates
}

func trackPods(ctx context.Context, t *testing.T, client kubernetes.Interface, ns, selector string) *podTracker {
	t.Helper()
	w, err := client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	tr := &podTracker{pods: podStates{}}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			tr.observe(ev.Type, pod, time.Now())
		}
	}()
	return tr
}

func (tr *podTracker) observe(typ watch.EventType, pod *corev1.Pod, now time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if typ == watch.Deleted {
		delete(tr.pods, pod.Name)
		return
	}
	s := tr.pods[pod.Name]
	s.pod = pod
	if s.scheduledAt.IsZero() && pod.Spec.NodeName != "" {
		s.scheduledAt = now
	}
	if s.readyAt.IsZero() && podReady(pod) {
		s.readyAt = now
	}
	tr.pods[pod.Name] = s
}

func (tr *podTracker) snapshot() podStates {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	out := make(podStates, len(tr.pods))
	for k, v := range tr.pods {
		out[k] = v
	}
	return out
}

func (tr *podTracker) waitFor(t *testing.T, what string, done func(podStates) bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 50*time.Millisecond, time.Minute, true,
		func(context.Context) (bool, error) { return done(tr.snapshot()), nil })
	if err != nil {
		s := tr.snapshot()
		t.Fatalf("waiting for %s: %v; %d pods, %d Ready", what, err, len(s), s.ready())
	}
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}
