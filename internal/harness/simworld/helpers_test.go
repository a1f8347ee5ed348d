package simworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
	"github.com/gpuscale/gpuscale/internal/harness/testlog"
)

// TestMain fails the package if a goroutine of the World, a simulated
// server, an exporter or an informer outlives the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if leaked := leakedGoroutines(10 * time.Second); leaked != "" {
			fmt.Fprintf(os.Stderr, "goroutines leaked:\n%s\n", leaked)
			code = 1
		}
	}
	os.Exit(code)
}

// leakedGoroutines waits up to timeout for the goroutines of the packages
// under test to end and returns the stacks of those that did not.
func leakedGoroutines(timeout time.Duration) string {
	suspects := []string{"simworld.", "inferencesim.", "cmd/exporter/app.", "pkg/exporter.",
		"podresources.", "client-go/tools/cache.", "google.golang.org/grpc.", "net/http.(*persistConn)"}
	deadline := time.Now().Add(timeout)
	for {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		var leaked []string
		// The first stack is this goroutine's.
		for _, g := range strings.Split(string(buf), "\n\n")[1:] {
			for _, s := range suspects {
				if strings.Contains(g, s) {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 || time.Now().After(deadline) {
			return strings.Join(leaked, "\n\n")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ipBase is the second octet of the pod IPs of this run of the tests,
// drawn so that two runs at once (say, two engineers' go test) do not
// fight over the same addresses. 127.1.0.0/16 is left to the e2e suite.
var ipBase = 100 + rand.IntN(150)

// podIP is test's host-th pod IP.
func podIP(test, host int) string { return fmt.Sprintf("127.%d.%d.%d", ipBase, test, host) }

// testWorld is a running World on a fake clientset.
type testWorld struct {
	*World
	client *kubefake.Clientset
	logs   *testlog.Buffer // the World's
}

// startWorld runs a World over a fake clientset holding objs until the test
// ends, and returns once its informers watch, so that later changes reach
// it. The test fails if Run does not return nil.
func startWorld(t *testing.T, objs ...k8sruntime.Object) *testWorld {
	t.Helper()
	return startWorldWith(t, nil, objs...)
}

// startWorldWith is startWorld with options changed by opt.
func startWorldWith(t *testing.T, opt func(*Options), objs ...k8sruntime.Object) *testWorld {
	t.Helper()
	client := kubefake.NewClientset(objs...)
	watching := map[string]chan struct{}{"pods": make(chan struct{}), "nodes": make(chan struct{})}
	var once sync.Map
	client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		if ch, ok := watching[a.GetResource().Resource]; ok {
			if _, loaded := once.LoadOrStore(a.GetResource().Resource, true); !loaded {
				close(ch)
			}
		}
		return false, nil, nil // the default reactor serves the watch
	})
	dir, err := os.MkdirTemp("", "sw")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	o := Options{
		Client: client, Dir: dir,
		Logger:            slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		GPUUpdateInterval: 200 * time.Millisecond,
		ExporterInterval:  200 * time.Millisecond,
	}
	if opt != nil {
		opt(&o)
	}
	w, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v, want nil", err)
			}
		case <-time.After(20 * time.Second):
			t.Errorf("Run did not return within 20s of cancellation")
		}
		if t.Failed() {
			t.Logf("world logs:\n%s", logs.String())
		}
		os.RemoveAll(dir)
	})
	for what, ch := range watching {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("the World does not watch %s", what)
		}
	}
	return &testWorld{World: w, client: client, logs: logs}
}

// logged waits until the World has logged want at least n times.
func (tw *testWorld) logged(t *testing.T, n int, want string) {
	t.Helper()
	eventually(t, 10*time.Second, fmt.Sprintf("%d log lines with %s", n, want), func() error {
		if got := strings.Count(tw.logs.String(), want); got < n {
			return fmt.Errorf("%d so far", got)
		}
		return nil
	})
}

// node is a kwok-like node advertising gpus GPUs.
func node(name string, gpus int64) *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			GPUResource: *resource.NewQuantity(gpus, resource.DecimalSI),
		}},
	}
}

// podOpt changes a test pod.
type podOpt func(*corev1.Pod)

func withLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		p.Labels = map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withEnv(name, value string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Env = append(p.Spec.Containers[0].Env, corev1.EnvVar{Name: name, Value: value})
	}
}

func withGPUs(n int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{GPUResource: *resource.NewQuantity(n, resource.DecimalSI)}
	}
}

// createdAt orders pods for GPU assignment.
func createdAt(sec int64) podOpt {
	return func(p *corev1.Pod) { p.CreationTimestamp = metav1.Unix(1_700_000_000+sec, 0) }
}

// pod is a running, ready pod of image bound to nodeName with ip, as kwok
// leaves it.
func pod(namespace, name, nodeName, ip, image string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, UID: types.UID("uid-" + namespace + "-" + name)},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "main", Image: image + ":test"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// setReady updates a pod's Ready condition through the API.
func (tw *testWorld) setReady(t *testing.T, namespace, name string, isReady bool) {
	t.Helper()
	ctx := context.Background()
	p, err := tw.client.CoreV1().Pods(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if isReady {
		status = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}
	if _, err := tw.client.CoreV1().Pods(namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// eventually retries check every 50ms until it passes or timeout ends.
func eventually(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s: still failing after %v: %v", what, timeout, last)
	}
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

// scrape fetches and parses url's exposition.
func scrape(url string) (map[string]*dto.MetricFamily, error) {
	resp, err := httpClient.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// refused reports whether nothing listens at url's address.
func refused(url string) error {
	resp, err := httpClient.Get(url)
	if err == nil {
		resp.Body.Close()
		return fmt.Errorf("GET %s answered %s", url, resp.Status)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("GET %s: %w, want connection refused", url, err)
	}
	return nil
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// gpuSeries returns family's value per GPU index from an exporter's
// exposition, with each GPU's pod ("namespace/pod", or "" for none).
func gpuSeries(url, family string) (values map[string]float64, pods map[string]string, err error) {
	mfs, err := scrape(url)
	if err != nil {
		return nil, nil, err
	}
	mf := mfs[family]
	if mf == nil {
		return nil, nil, errors.New("no " + family + " in the exposition")
	}
	values, pods = map[string]float64{}, map[string]string{}
	for _, m := range mf.GetMetric() {
		l := labelsOf(m)
		values[l["gpu"]] = m.GetGauge().GetValue()
		if l["pod"] != "" {
			pods[l["gpu"]] = l["namespace"] + "/" + l["pod"]
		}
	}
	return values, pods, nil
}
