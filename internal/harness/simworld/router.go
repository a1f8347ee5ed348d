package simworld

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// RouterImage marks a simulated router: the Gateway API inference
// extension's endpoint picker with flow control, in front of the pods its
// container's env SIM_ROUTE_SELECTOR (a label selector, required) selects
// in its namespace, serving the model SIM_MODEL (inferencesim.DefaultModel
// when unset) of the pool SIM_INFERENCE_POOL (the pod's name when unset).
// It holds the requests it gets while no backend is ready and forwards
// them, in arrival order, once one is.
const RouterImage = "gpuscale.io/router"

// eppQueueSize is the endpoint picker's flow-control gauge, with its
// labels, as gateway-api-inference-extension v1.5.0 defines it in
// pkg/epp/metrics/metrics.go (flowControlQueueSize).
const eppQueueSize = "inference_extension_flow_control_queue_size"

var eppQueueLabels = []string{"fairness_id", "priority", "inference_pool", "model_name", "target_model_name"}

// routerPoll is how often a router holding requests looks for a backend.
// kube-proxy takes longer than that to add an endpoint.
const routerPoll = 50 * time.Millisecond

// RouterStats counts what a router did with the requests it got.
type RouterStats struct {
	// Received is every request sent to the router, Held those it is
	// holding now.
	Received, Held int
	// Buffered counts the requests it had to hold (no ready backend on
	// arrival), Forwarded those it handed to a backend, after holding or
	// not.
	Buffered, Forwarded int
	// Errors counts requests a backend refused: each is a request
	// answered with an error.
	Errors int
	// FirstTokens counts forwarded requests whose first token came back.
	FirstTokens int
	// Polls counts the router's rounds (one every routerPoll) of taking
	// in the World's load and forwarding what it holds: a test waits on
	// it to know the router has had the chance to do something.
	Polls int
}

// heldRequest is a request a router holds.
type heldRequest struct {
	req          inferencesim.Request
	onFirstToken func(time.Duration)
}

// Router is a simulated router's state.
type Router struct {
	namespace string
	selector  labels.Selector
	model     string
	send      func(namespace string, selector labels.Selector, r inferencesim.Request, onFirstToken func(time.Duration)) (string, error)

	mu    sync.Mutex
	held  []heldRequest
	stats RouterStats
	// idleRate is the rate of the World's load for the router's
	// selector while it has no backend: arrivals it holds. owed is the
	// fraction of a request accrued.
	idleRate float64
	owed     float64
	queue    prometheus.Gauge
}

// routerRun serves one router pod.
type routerRun struct {
	pod    podKey
	addr   string
	router *Router
	http   *http.Server
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// routerAddr is where p's router listens, or "" if p has none.
func (w *World) routerAddr(p *corev1.Pod) string {
	c := simContainer(p, RouterImage)
	if c == nil || !serving(p) {
		return ""
	}
	return listenAddr(p, c, w.opts.RouterPort)
}

// startRouter serves the router of pod's container c on addr until stop.
func startRouter(log *slog.Logger, pod podKey, c *corev1.Container, addr string,
	send func(string, labels.Selector, inferencesim.Request, func(time.Duration)) (string, error)) (*routerRun, error) {
	sel, err := labels.Parse(env(c, "SIM_ROUTE_SELECTOR", ""))
	if err != nil || sel.Empty() {
		return nil, fmt.Errorf("SIM_ROUTE_SELECTOR: a non-empty label selector is required (%v)", err)
	}
	model := env(c, "SIM_MODEL", inferencesim.DefaultModel)
	pool := env(c, "SIM_INFERENCE_POOL", pod.Name)
	reg := prometheus.NewRegistry()
	queue := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: eppQueueSize,
		Help: "Current number of requests actively held in the Flow Control queue.",
	}, eppQueueLabels)
	info := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "inference_extension_info",
		Help: "General information of the current build of Inference Extension.",
	}, []string{"commit", "build_ref"})
	reg.MustRegister(queue, info)
	info.WithLabelValues("simulated", "simworld").Set(1)
	r := &Router{namespace: pod.Namespace, selector: sel, model: model, send: send,
		queue: queue.WithLabelValues("default", "0", pool, model, model)}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	run := &routerRun{pod: pod, addr: addr, router: r, cancel: cancel,
		http: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	log = log.With("pod", pod.String(), "address", addr)
	run.wg.Add(2)
	go func() {
		defer run.wg.Done()
		if err := run.http.Serve(l); !errors.Is(err, http.ErrServerClosed) {
			log.Warn("router stopped", "err", err)
		}
	}()
	go func() {
		defer run.wg.Done()
		r.loop(ctx, log)
	}()
	log.Info("router started", "model", model, "backends", sel.String())
	return run, nil
}

func (r *routerRun) stop() {
	r.cancel()
	_ = r.http.Close()
	r.wg.Wait()
}

// Send routes one request: straight to a ready backend if there is one,
// else held until there is. It fails only when a backend refuses it.
func (r *Router) Send(req inferencesim.Request, onFirstToken func(time.Duration)) error {
	r.mu.Lock()
	r.stats.Received++
	queued := len(r.held) > 0 // keep arrival order behind held requests
	if queued {
		r.holdLocked(req, onFirstToken)
	}
	r.mu.Unlock()
	if queued {
		return nil
	}
	_, err := r.send(r.namespace, r.selector, req, r.counted(onFirstToken))
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case errors.Is(err, ErrNoBackend):
		r.holdLocked(req, onFirstToken)
		return nil
	case err != nil:
		r.stats.Errors++
		return err
	}
	r.stats.Forwarded++
	return nil
}

// Stats returns the router's counts.
func (r *Router) Stats() RouterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Held = len(r.held)
	return s
}

func (r *Router) holdLocked(req inferencesim.Request, onFirstToken func(time.Duration)) {
	r.held = append(r.held, heldRequest{req, onFirstToken})
	r.stats.Buffered++
	r.queue.Set(float64(len(r.held)))
}

// counted wraps a first-token callback to count first tokens.
func (r *Router) counted(onFirstToken func(time.Duration)) func(time.Duration) {
	return func(d time.Duration) {
		r.mu.Lock()
		r.stats.FirstTokens++
		r.mu.Unlock()
		if onFirstToken != nil {
			onFirstToken(d)
		}
	}
}

// setIdleRate is the World's load for the router's backends while none is
// ready: those arrivals reach the router and wait there.
func (r *Router) setIdleRate(rps float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.idleRate = rps
	if rps == 0 {
		r.owed = 0
	}
}

// loop accrues idle-rate arrivals and forwards held requests once a
// backend is ready.
func (r *Router) loop(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(routerPoll)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			r.accrue(now.Sub(last))
			last = now
			r.forward(log)
			r.mu.Lock()
			r.stats.Polls++
			r.mu.Unlock()
		}
	}
}

func (r *Router) accrue(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.idleRate <= 0 {
		return
	}
	r.owed += r.idleRate * d.Seconds()
	for ; r.owed >= 1; r.owed-- {
		r.stats.Received++
		r.holdLocked(inferencesim.DefaultRequest, nil)
	}
}

// forward hands held requests, oldest first, to ready backends until none
// is left or no backend is ready.
func (r *Router) forward(log *slog.Logger) {
	for {
		r.mu.Lock()
		if len(r.held) == 0 {
			r.mu.Unlock()
			return
		}
		h := r.held[0]
		r.mu.Unlock()
		_, err := r.send(r.namespace, r.selector, h.req, r.counted(h.onFirstToken))
		if errors.Is(err, ErrNoBackend) {
			return
		}
		r.mu.Lock()
		r.held = r.held[1:]
		r.queue.Set(float64(len(r.held)))
		if err != nil {
			r.stats.Errors++
			log.Warn("held request refused by its backend", "err", err)
		} else {
			r.stats.Forwarded++
		}
		r.mu.Unlock()
	}
}

// Router returns the router of a pod, or nil if it has none running.
func (w *World) Router(namespace, pod string) *Router {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, r := range w.routers {
		if k.Namespace == namespace && k.Name == pod {
			return r.router
		}
	}
	return nil
}
