// Package scaledown is a controller that makes HorizontalPodAutoscaler
// scale-downs give GPU nodes back to the cluster autoscaler. For pods
// labelled gpuscale.io/scale-down=managed it keeps two annotations up to
// date: controller.kubernetes.io/pod-deletion-cost, so that the ReplicaSet
// removes first the replicas on the GPU nodes holding the fewest GPU pods
// (whole nodes empty out instead of every node staying half full), and
// cluster-autoscaler.kubernetes.io/safe-to-evict "false" on replicas that
// are serving, so no node is drained mid-request. It also reports, as
// metrics, how the cluster autoscaler rates every GPU node.
//
// It reads only informer caches and the adapter's metric values (Loads:
// the embedded store or Prometheus, whichever --source serves); it writes
// only annotations of the pods it manages, through a token-bucket rate
// limit. Run it in one replica at a time: RunLeaderElected runs it while
// the process holds a Lease.
package scaledown

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// Loads is where the controller reads how busy pods are: the values the
// adapter serves, from either source. A value the source does not call
// fresh is no value: unknown load, never idle.
type Loads interface {
	Pods(ctx context.Context, pods *provider.PodSet, m provider.Metric, sel labels.Selector) ([]provider.Value, error)
}

// Config configures a Controller. Zero durations and rates take
// Defaults()'s.
type Config struct {
	Client kubernetes.Interface
	Pods   corev1listers.PodLister
	Nodes  corev1listers.NodeLister
	Loads  Loads
	// IdleTime is how long a replica must have been idle before its
	// safe-to-evict "false" is cleared.
	IdleTime time.Duration
	// Resync is the period of reconciles without events; Debounce gathers
	// a burst of events into one reconcile.
	Resync, Debounce time.Duration
	// PatchQPS and PatchBurst size the token bucket every patch takes a
	// token from.
	PatchQPS   float64
	PatchBurst int
	// GPUUtilizationThreshold and UnneededTime mirror the cluster
	// autoscaler's --scale-down-gpu-utilization-threshold and
	// --scale-down-unneeded-time; they only shape metrics.
	GPUUtilizationThreshold float64
	UnneededTime            time.Duration
	// GPUResource is the extended resource GPUs are requested as.
	GPUResource corev1.ResourceName
	Clock       clock.Clock
	Logger      *slog.Logger
}

// Defaults are the values a zero field takes; the timings and thresholds
// are the cluster autoscaler's defaults where it has a flag of the name.
func Defaults() Config {
	return Config{IdleTime: 5 * time.Minute, Resync: 10 * time.Second, Debounce: 500 * time.Millisecond,
		PatchQPS: 10, PatchBurst: 20, GPUUtilizationThreshold: 0.5, UnneededTime: 10 * time.Minute,
		GPUResource: DefaultGPUResource}
}

func (c *Config) defaults() error {
	if c.Client == nil || c.Pods == nil || c.Nodes == nil || c.Loads == nil {
		return errors.New("scaledown: Client, Pods, Nodes and Loads are required")
	}
	d := Defaults()
	c.IdleTime = or(c.IdleTime, d.IdleTime)
	c.Resync = or(c.Resync, d.Resync)
	c.Debounce = or(c.Debounce, d.Debounce)
	c.PatchQPS = or(c.PatchQPS, d.PatchQPS)
	c.PatchBurst = or(c.PatchBurst, d.PatchBurst)
	c.GPUUtilizationThreshold = or(c.GPUUtilizationThreshold, d.GPUUtilizationThreshold)
	c.UnneededTime = or(c.UnneededTime, d.UnneededTime)
	c.GPUResource = or(c.GPUResource, d.GPUResource)
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// Controller keeps managed pods' deletion costs and safe-to-evict
// annotations up to date. Create it with New.
type Controller struct {
	cfg     Config
	log     *slog.Logger
	limiter *rate.Limiter
	trigger chan struct{}
	leading atomic.Bool
	metrics *counters

	// mu guards the state below: Reconcile writes it, Collect reads the
	// snapshot.
	mu         sync.Mutex
	idleSince  map[types.UID]time.Time
	belowSince map[string]time.Time
	pending    map[types.UID]pendingPatch
	snap       snapshot
	// deferred holds the pods the rate limit left waiting in the last
	// reconcile; only Reconcile uses it.
	deferred map[types.UID]bool
}

// New returns a Controller. Register its event handlers on the pod and
// node informers (Handlers) and its metrics (Collector) before Run.
func New(cfg Config) (*Controller, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Controller{
		cfg:        cfg,
		log:        cfg.Logger,
		limiter:    rate.NewLimiter(rate.Limit(cfg.PatchQPS), cfg.PatchBurst),
		trigger:    make(chan struct{}, 1),
		metrics:    newCounters(),
		idleSince:  map[types.UID]time.Time{},
		belowSince: map[string]time.Time{},
		pending:    map[types.UID]pendingPatch{},
	}, nil
}

// Run reconciles on events (debounced) and every Resync until ctx is done.
// Call it while holding leadership; it returns when ctx is done.
func (c *Controller) Run(ctx context.Context) {
	c.leading.Store(true)
	defer c.stopLeading()
	c.log.Info("scale-down controller leading", "resync", c.cfg.Resync, "patchQPS", c.cfg.PatchQPS, "patchBurst", c.cfg.PatchBurst)
	timer := c.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	due := c.cfg.Clock.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.trigger:
			if at := c.cfg.Clock.Now().Add(c.cfg.Debounce); at.Before(due) {
				due = at
				resetTimer(timer, c.cfg.Debounce)
			}
		case <-timer.C():
			next := c.cfg.Resync
			if res := c.Reconcile(ctx); res.RequeueAfter > 0 {
				next = min(next, res.RequeueAfter)
			}
			due = c.cfg.Clock.Now().Add(next)
			timer.Reset(next)
		}
	}
}

func resetTimer(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// stopLeading forgets what only the leader knows: another replica now
// reports the autoscaler's view.
func (c *Controller) stopLeading() {
	c.leading.Store(false)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap = snapshot{}
	clear(c.idleSince)
	clear(c.belowSince)
	clear(c.pending)
	c.deferred = nil
}

func (c *Controller) enqueue() {
	select {
	case c.trigger <- struct{}{}:
	default:
	}
}

// PodHandler triggers a reconcile when a pod that can change a plan
// (managed, or holding GPUs) changes.
func (c *Controller) PodHandler() cache.ResourceEventHandler {
	relevant := func(obj any) bool {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		p, ok := obj.(*corev1.Pod)
		return ok && (isManaged(p) || PodGPUs(p, c.cfg.GPUResource) > 0)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if relevant(obj) {
				c.enqueue()
			}
		},
		UpdateFunc: func(old, obj any) {
			if relevant(old) || relevant(obj) {
				c.enqueue()
			}
		},
		DeleteFunc: func(obj any) {
			if relevant(obj) {
				c.enqueue()
			}
		},
	}
}

// NodeHandler triggers a reconcile when a node comes or goes, or its GPUs
// or scale-down-disabled annotation change; heartbeats do not.
func (c *Controller) NodeHandler() cache.ResourceEventHandler {
	return cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { c.enqueue() },
		UpdateFunc: func(old, obj any) {
			o, ok1 := old.(*corev1.Node)
			n, ok2 := obj.(*corev1.Node)
			if !ok1 || !ok2 || nodeGPUs(o, c.cfg.GPUResource) != nodeGPUs(n, c.cfg.GPUResource) ||
				o.Annotations[ScaleDownDisabledAnnotation] != n.Annotations[ScaleDownDisabledAnnotation] {
				c.enqueue()
			}
		},
		DeleteFunc: func(any) { c.enqueue() },
	}
}

// Collector returns the controller's metrics: the autoscaler's view of
// every GPU node (reported by the leader only) and patch counters.
func (c *Controller) Collector() prometheus.Collector { return collector{c} }
