// Package simworld gives the pods of a kubelet-less cluster (kwok's fake
// nodes) the behaviour their containers would have, so that autoscaling
// decisions taken against that cluster have consequences.
//
// A World watches pods and nodes and, from the process it runs in, serves
// what the pods' containers would serve on their pod IPs (kwok hands out
// loopback addresses, and Linux answers on all of 127.0.0.0/8):
//
//   - a pod with an InferenceImage container runs a simulated inference
//     server (pkg/inferencesim) on podIP:8000;
//   - a pod with an ExporterImage container runs the gpuscale exporter with
//     simulated GPUs, named after its node, on podIP:9400;
//   - every node gets a kubelet pod-resources gRPC socket that reports the
//     node's pods and the GPUs a device plugin would have given them;
//   - a pod with a RouterImage container runs a simulated endpoint picker
//     on podIP:9090, which holds the requests it gets while none of its
//     backends is ready, forwards them once one is, and exposes what it
//     holds by model in the EPP's metric (router.go).
//
// The pieces are tied together as in a real cluster: SetRate spreads a
// request rate over the ready pods behind a selector as a Service would,
// and every GPUUpdateInterval each server's busy fraction and KV cache use
// become the utilization and memory of the GPUs its pod holds, set through
// the node exporter's simulation API. While a selector has no ready pod,
// its SetRate load goes to the routers in front of it instead, which hold
// it. Faults (a dead metrics endpoint, a missing exporter) can be injected.
package simworld

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// Image prefixes that make a pod simulated: a container whose image starts
// with one of them is served by the World.
const (
	// InferenceImage marks a simulated inference server. Its container's
	// env SIM_DIALECT (vllm, sglang, tgi, triton; vllm by default) and
	// SIM_MODEL choose what it speaks and serves.
	InferenceImage = "gpuscale.io/inferencesim"
	// ExporterImage marks a gpuscale exporter with the simulated backend.
	ExporterImage = "gpuscale.io/exporter"
)

// GPUResource is the extended resource whose devices the World assigns.
const GPUResource = "nvidia.com/gpu"

// Options configure a World.
type Options struct {
	// Client reads pods and nodes. Required.
	Client kubernetes.Interface
	// Dir holds the pod-resources unix sockets. Keep it short (for example
	// os.MkdirTemp("", "sw")): socket paths are limited to ~107 bytes.
	// Required.
	Dir    string
	Logger *slog.Logger
	// InferencePort is where inference servers listen when their container
	// declares no port; 8000 when zero.
	InferencePort int
	// ExporterPort is where exporters listen when their container declares
	// no port; 9400 when zero.
	ExporterPort int
	// RouterPort is where routers (RouterImage) listen when their
	// container declares no port; 9090, the endpoint picker's metrics
	// port, when zero.
	RouterPort int
	// GPUUpdateInterval is how often GPU load follows the servers' work and
	// how often failed starts are retried; 1s when zero.
	GPUUpdateInterval time.Duration
	// ExporterInterval is the simulated exporters' collection and
	// pod-resources refresh interval; 1s when zero.
	ExporterInterval time.Duration
	// Now is the clock the inference servers simulate by; time.Now when
	// nil. A trace replay passes a clock that runs faster than the wall's,
	// so that an hour of traffic plays in minutes.
	Now func() time.Time
	// TimeScale is how many times faster than the wall clock Now runs: a
	// deleted pod's grace period, preStop sleep and shutdown timeout, which
	// are wall time, last TimeScale times as long on Now's clock. 1 when
	// zero.
	TimeScale float64
}

// podKey names a pod. The UID tells a pod from a successor with the same
// name, as a StatefulSet makes.
type podKey struct {
	Namespace, Name string
	UID             types.UID
}

func (k podKey) String() string { return k.Namespace + "/" + k.Name }

// rateRule is one SetRate call: a Service-like selector and its total rate.
type rateRule struct {
	namespace string
	selector  labels.Selector
	rps       float64
}

// World serves the simulated pods of a cluster. Its methods are safe for
// concurrent use.
type World struct {
	opts   Options
	log    *slog.Logger
	client *http.Client
	kick   chan struct{}

	mu       sync.Mutex
	started  bool                     // Run was called
	pods     corev1listers.PodLister  // nil until Run has synced
	nodes    corev1listers.NodeLister // nil until Run has synced
	podIndex cache.Indexer            // pods by node; nil until Run has synced
	servers  map[podKey]*inferenceRun
	exporter map[podKey]*exporterRun
	routers  map[podKey]*routerRun
	sockets  map[string]*podResourcesServer // by node
	gpus     map[string]map[podKey]allocation
	rules    []rateRule
	// What fault injection stopped; it stays down for the pod's lifetime.
	muted map[muteKey]bool
	// GPUs to set idle at the next update: freed by a deleted pod (memory
	// too) or held by a muted one (utilization only).
	idle map[gpuRef]bool
	// next is Send's round-robin position per namespace and selector.
	next map[string]int
	// draining counts servers of deleted pods still finishing their work;
	// closing stopDrains ends them.
	draining   sync.WaitGroup
	stopDrains chan struct{}
	// terminating holds those servers until they stop; aborted counts, by
	// namespace, the requests they dropped (terminate.go).
	terminating map[podKey]*inferenceRun
	aborted     map[string]inferencesim.Aborted
	// deletionGrace is the grace period each pod's deletion first gave
	// it (noteDeletion), until its server's termination reads it.
	deletionGrace map[podKey]time.Duration
}

// muteKey is a pod's inference server or exporter, by image prefix.
type muteKey struct {
	pod   podKey
	image string
}

// gpuRef is one GPU of one node.
type gpuRef struct {
	Node  string
	Index int
}

// New checks o and builds a World; Run starts it.
func New(o Options) (*World, error) {
	if o.Client == nil {
		return nil, errors.New("simworld: Options.Client is required")
	}
	if o.Dir == "" {
		return nil, errors.New("simworld: Options.Dir is required")
	}
	o.Logger = cmp.Or(o.Logger, slog.New(slog.DiscardHandler))
	o.InferencePort = cmp.Or(o.InferencePort, 8000)
	o.ExporterPort = cmp.Or(o.ExporterPort, 9400)
	o.RouterPort = cmp.Or(o.RouterPort, 9090)
	o.GPUUpdateInterval = cmp.Or(o.GPUUpdateInterval, time.Second)
	o.ExporterInterval = cmp.Or(o.ExporterInterval, time.Second)
	if o.Now == nil {
		o.Now = time.Now
	}
	if !(o.TimeScale > 0) {
		o.TimeScale = 1
	}
	return &World{
		opts:       o,
		log:        o.Logger,
		client:     &http.Client{Timeout: 2 * time.Second},
		kick:       make(chan struct{}, 1),
		servers:    map[podKey]*inferenceRun{},
		exporter:   map[podKey]*exporterRun{},
		routers:    map[podKey]*routerRun{},
		sockets:    map[string]*podResourcesServer{},
		gpus:       map[string]map[podKey]allocation{},
		muted:      map[muteKey]bool{},
		idle:       map[gpuRef]bool{},
		next:       map[string]int{},
		stopDrains: make(chan struct{}),

		terminating:   map[podKey]*inferenceRun{},
		aborted:       map[string]inferencesim.Aborted{},
		deletionGrace: map[podKey]time.Duration{},
	}, nil
}

// SetRate sets the total request rate of the pods in namespace matching
// selector, as if clients sent rps requests per second to a Service with
// that selector: it is spread evenly over the ready matching pods whose
// server runs, and spread again whenever readiness or membership changes. A
// later call with the same namespace and selector replaces the rate.
func (w *World) SetRate(namespace string, selector labels.Selector, rps float64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	rule := rateRule{namespace: namespace, selector: selector, rps: rps}
	i := slices.IndexFunc(w.rules, func(r rateRule) bool {
		return r.namespace == namespace && r.selector.String() == selector.String()
	})
	if i < 0 {
		w.rules = append(w.rules, rule)
	} else {
		w.rules[i] = rule
	}
	w.spreadLocked()
}

// Server returns the inference server of a pod, or nil if it has none
// running (not yet started, deleted, or stopped by StopServing).
func (w *World) Server(namespace, pod string) *inferencesim.Server {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, r := range w.servers {
		if k.Namespace == namespace && k.Name == pod {
			return r.srv
		}
	}
	return nil
}

// StopServing injects a fault: the pod's inference server stops listening
// (clients get connection refused) while the pod stays Ready, as when a
// process hangs or its metrics port dies. Its GPUs go idle and its share of
// SetRate traffic moves to the other pods. It stays down for the pod's
// lifetime; a new pod of the same name serves again.
func (w *World) StopServing(namespace, pod string) {
	w.mu.Lock()
	var stop []*inferenceRun
	for k, r := range w.servers {
		if k.Namespace == namespace && k.Name == pod {
			delete(w.servers, k)
			for _, i := range w.gpus[r.node][k][r.container] {
				w.markIdleLocked(gpuRef{r.node, i}, false)
			}
			stop = append(stop, r)
		}
	}
	// Also mute a pod whose server has not started yet.
	if w.pods != nil {
		if p, err := w.pods.Pods(namespace).Get(pod); err == nil {
			w.muted[muteKey{keyOf(p), InferenceImage}] = true
		}
	}
	for _, r := range stop {
		w.muted[muteKey{r.pod, InferenceImage}] = true
	}
	w.spreadLocked()
	w.mu.Unlock()
	for _, r := range stop {
		w.log.Info("fault injected: inference server stopped", "pod", r.pod.String())
		r.stop()
	}
}

// StopExporter injects a fault: the exporter pods on node stop serving
// while they stay Ready, for their lifetime, so GPU metrics of the node
// disappear and GPU load stops being updated.
func (w *World) StopExporter(node string) {
	w.mu.Lock()
	var stop []*exporterRun
	for k, r := range w.exporter {
		if r.node == node {
			delete(w.exporter, k)
			stop = append(stop, r)
		}
	}
	if w.podIndex != nil {
		for _, p := range w.nodePodsLocked(node) {
			if simContainer(p, ExporterImage) != nil {
				w.muted[muteKey{keyOf(p), ExporterImage}] = true
			}
		}
	}
	for _, r := range stop {
		w.muted[muteKey{r.pod, ExporterImage}] = true
	}
	w.mu.Unlock()
	for _, r := range stop {
		w.log.Info("fault injected: exporter stopped", "node", node, "pod", r.pod.String())
		r.stop()
	}
}

// PodResourcesSocket returns the path of node's pod-resources socket. The
// path is fixed by the node's name; the socket exists while Run sees the
// node.
func (w *World) PodResourcesSocket(node string) string {
	return socketPath(w.opts.Dir, node)
}

// trigger asks the Run loop to reconcile soon.
func (w *World) trigger() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// markIdleLocked queues a GPU to be set idle at the next update; with
// freeMemory its framebuffer is emptied too, as when its pod is gone.
func (w *World) markIdleLocked(g gpuRef, freeMemory bool) {
	w.idle[g] = w.idle[g] || freeMemory
}

// ErrNoBackend is what Send returns when no ready pod serves a selector,
// as a connection to a Service without endpoints fails.
var ErrNoBackend = errors.New("no ready backend")

// Send delivers one request to a ready pod in namespace matching selector
// whose server runs, taking them in turn (round-robin by pod name, as
// kube-proxy's IPVS mode balances a Service), and returns the pod's name.
// onFirstToken hears the request's time to first token, on the servers'
// clock; it runs with the server locked and must not call back into it.
func (w *World) Send(namespace string, selector labels.Selector, r inferencesim.Request, onFirstToken func(ttft time.Duration)) (string, error) {
	return w.SendFollow(namespace, selector, r, inferencesim.Follow{FirstToken: onFirstToken})
}

// SendFollow is Send for a caller that also hears when the request is
// dropped unfinished because its pod was deleted (terminate.go). f's
// functions run with the server locked and must not call back into it.
func (w *World) SendFollow(namespace string, selector labels.Selector, r inferencesim.Request, f inferencesim.Follow) (string, error) {
	w.mu.Lock()
	if w.pods == nil {
		w.mu.Unlock()
		return "", errors.New("simworld: the world is not running")
	}
	pods, err := w.pods.Pods(namespace).List(selector)
	if err != nil {
		w.mu.Unlock()
		return "", fmt.Errorf("simworld: list pods: %w", err)
	}
	var backends []*inferenceRun
	for _, p := range pods {
		if run := w.servers[keyOf(p)]; run != nil && Ready(p) {
			backends = append(backends, run)
		}
	}
	if len(backends) == 0 {
		w.mu.Unlock()
		return "", fmt.Errorf("simworld: send to %s/%s: %w", namespace, selector, ErrNoBackend)
	}
	slices.SortFunc(backends, func(a, b *inferenceRun) int { return cmp.Compare(a.pod.Name, b.pod.Name) })
	key := namespace + "/" + selector.String()
	run := backends[w.next[key]%len(backends)]
	w.next[key]++
	w.mu.Unlock()
	if err := run.srv.SubmitFollow(r, f); err != nil {
		return run.pod.Name, fmt.Errorf("simworld: send to %s: %w", run.pod, err)
	}
	return run.pod.Name, nil
}
