package scaledown

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const staleness = 3 * time.Second

// fixture is a controller on a fake clientset with real informers, a real
// store and a fake clock.
type fixture struct {
	t       *testing.T
	client  *kubefake.Clientset
	factory informers.SharedInformerFactory
	clock   *clocktesting.FakeClock
	store   *store.Store
	ctrl    *Controller
	// slim, when set, is the pod informer's transform's Keep.
	slim podslim.Keep

	mu      sync.Mutex
	patched []string // namespace/name of every patch the API server received
}

func newFixture(t *testing.T, cfg Config, objs ...runtime.Object) *fixture {
	t.Helper()
	return newSlimFixture(t, cfg, nil, objs...)
}

// newSlimFixture is newFixture with the pod informer's cache holding pods
// slimmed by keep, as the adapter's does; nil keeps full pods.
func newSlimFixture(t *testing.T, cfg Config, keep podslim.Keep, objs ...runtime.Object) *fixture {
	t.Helper()
	f := &fixture{t: t, client: kubefake.NewClientset(objs...), clock: clocktesting.NewFakeClock(t0), store: store.New(8), slim: keep}
	f.client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.patched = append(f.patched, a.GetNamespace()+"/"+a.(k8stesting.PatchAction).GetName())
		return false, nil, nil // the tracker applies it
	})
	f.factory = informers.NewSharedInformerFactory(f.client, 0)
	pods, nodes := f.factory.Core().V1().Pods(), f.factory.Core().V1().Nodes()
	if keep != nil {
		if err := pods.Informer().SetTransform(podslim.Transform(keep)); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Client, cfg.Pods, cfg.Nodes, cfg.Clock = f.client, pods.Lister(), nodes.Lister(), f.clock
	if cfg.Loads == nil {
		cfg.Loads = storesource.New(f.store, staleness, time.Minute, f.clock.Now)
	}
	cfg.PatchQPS = or(cfg.PatchQPS, 1e6)
	cfg.PatchBurst = or(cfg.PatchBurst, 1e6)
	ctrl, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.ctrl = ctrl
	if _, err := pods.Informer().AddEventHandler(ctrl.PodHandler()); err != nil {
		t.Fatal(err)
	}
	if _, err := nodes.Informer().AddEventHandler(ctrl.NodeHandler()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); f.factory.Shutdown() })
	f.factory.Start(ctx.Done())
	f.factory.WaitForCacheSync(ctx.Done())
	if err := f.client.WaitForWatches(ctx, "pods", "nodes"); err != nil {
		t.Fatal(err)
	}
	return f
}

// reconcile runs one reconcile and waits for the informers to see what it
// patched, as they would between two reconciles in a real cluster.
func (f *fixture) reconcile() Result {
	f.t.Helper()
	res := f.ctrl.Reconcile(context.Background())
	f.settle()
	return res
}

// settle waits until the pod cache agrees with the API server.
func (f *fixture) settle() {
	f.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 5*time.Second, true, func(ctx context.Context) (bool, error) {
		l, err := f.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		for i := range l.Items {
			p := &l.Items[i]
			c, err := f.factory.Core().V1().Pods().Lister().Pods(p.Namespace).Get(p.Name)
			want := p.Annotations
			if f.slim != nil {
				want = podslim.Slim(p, f.slim).Annotations
			}
			if err != nil || !maps.Equal(c.Annotations, want) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		f.t.Fatalf("informer cache never caught up: %v", err)
	}
}

func (f *fixture) patches() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.patched
	f.patched = nil
	return out
}

// annotations reads a pod's annotations from the API server.
func (f *fixture) annotations(ns, name string) map[string]string {
	f.t.Helper()
	p, err := f.client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return p.Annotations
}

func (f *fixture) cost(ns, name string) int {
	f.t.Helper()
	v, ok := f.annotations(ns, name)[DeletionCostAnnotation]
	if !ok {
		f.t.Fatalf("%s/%s has no deletion cost", ns, name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		f.t.Fatalf("%s/%s: deletion cost %q: %v", ns, name, v, err)
	}
	return n
}

// setLoad stores a fresh inference sample of queued and running requests
// for a pod, at the fake clock's time.
func (f *fixture) setLoad(ns, name string, queued, running float64) {
	var s store.Sample
	s.Time = f.clock.Now()
	s.Set(signal.QueueDepth, queued)
	s.Set(signal.RequestsRunning, running)
	f.store.PutPod(store.Key{Namespace: ns, Name: name}, signal.SourceInference, s)
}

func gpuNode(name string, gpus int64) *corev1.Node {
	res := corev1.ResourceList{DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: res, Capacity: res}}
}

// pod is a running pod of ReplicaSet "rs" on node requesting gpus GPUs.
func pod(ns, name, node string, gpus int64, managed bool) *corev1.Pod {
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name), Labels: map[string]string{"app": "llm"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs", Controller: &yes}}},
		Spec:   corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "vllm"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if gpus > 0 {
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{DefaultGPUResource: *resource.NewQuantity(gpus, resource.DecimalSI)}
	}
	if managed {
		p.Labels[ManagedLabel] = ManagedValue
	}
	return p
}

func mergePatchAnnotations(t testing.TB, patch []byte) map[string]*string {
	var body struct {
		Metadata struct {
			Annotations map[string]*string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(patch, &body); err != nil {
		t.Fatal(err)
	}
	return body.Metadata.Annotations
}
