package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// scaleDownLease is the Lease the adapter replicas elect the scale-down
// controller's leader with.
const scaleDownLease = "gpuscale-scale-down"

// Leader election timings: client-go's usual values.
const (
	leaseDuration = 15 * time.Second
	renewDeadline = 10 * time.Second
	retryPeriod   = 2 * time.Second
)

// ScaleDownOptions are the scale-down controller's flags. Thresholds and
// timers mirror the cluster autoscaler's flags of the same names.
type ScaleDownOptions struct {
	Enabled                 bool
	LeaseNamespace          string
	Resync                  time.Duration
	IdleTime                time.Duration
	PatchQPS                float64
	PatchBurst              int
	GPUUtilizationThreshold float64
	UnneededTime            time.Duration
}

// defaultScaleDownOptions takes the controller's defaults from the
// controller.
func defaultScaleDownOptions() ScaleDownOptions {
	d := scaledown.Defaults()
	return ScaleDownOptions{LeaseNamespace: "gpuscale", Resync: d.Resync, IdleTime: d.IdleTime,
		PatchQPS: d.PatchQPS, PatchBurst: d.PatchBurst, GPUUtilizationThreshold: d.GPUUtilizationThreshold, UnneededTime: d.UnneededTime}
}

// AddFlags registers the options.
func (o *ScaleDownOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "scale-down-controller", o.Enabled, "Run the scale-down controller: deletion costs that empty whole GPU nodes and safe-to-evict protection of serving replicas, for pods labelled gpuscale.io/scale-down=managed. Leader-elected.")
	fs.StringVar(&o.LeaseNamespace, "scale-down-lease-namespace", o.LeaseNamespace, "Namespace of the scale-down controller's leader-election Lease ("+scaleDownLease+").")
	fs.DurationVar(&o.Resync, "scale-down-resync", o.Resync, "How often the scale-down controller reconciles without events.")
	fs.DurationVar(&o.IdleTime, "scale-down-idle-time", o.IdleTime, "How long a managed replica must be idle (no queued or running requests) before its safe-to-evict=false is cleared.")
	fs.Float64Var(&o.PatchQPS, "scale-down-patch-qps", o.PatchQPS, "Pod annotation patches per second the scale-down controller may send.")
	fs.IntVar(&o.PatchBurst, "scale-down-patch-burst", o.PatchBurst, "Burst of pod annotation patches above --scale-down-patch-qps.")
	fs.Float64Var(&o.GPUUtilizationThreshold, "scale-down-gpu-utilization-threshold", o.GPUUtilizationThreshold, "The cluster autoscaler's flag of the same name: GPU nodes below it are scale-down candidates (reported in metrics).")
	fs.DurationVar(&o.UnneededTime, "scale-down-unneeded-time", o.UnneededTime, "The cluster autoscaler's flag of the same name: how long a node must be unneeded before it is removed (reported in metrics).")
}

func (o *ScaleDownOptions) validate() []error {
	var errs []error
	if o.Resync <= 0 {
		errs = append(errs, fmt.Errorf("--scale-down-resync must be positive, got %v", o.Resync))
	}
	if o.IdleTime < 0 {
		errs = append(errs, fmt.Errorf("--scale-down-idle-time must not be negative, got %v", o.IdleTime))
	}
	if o.PatchQPS <= 0 || o.PatchBurst < 1 {
		errs = append(errs, errors.New("--scale-down-patch-qps must be positive and --scale-down-patch-burst at least 1"))
	}
	if o.GPUUtilizationThreshold <= 0 || o.GPUUtilizationThreshold > 1 {
		errs = append(errs, fmt.Errorf("--scale-down-gpu-utilization-threshold must be in (0, 1], got %g", o.GPUUtilizationThreshold))
	}
	if o.UnneededTime <= 0 {
		errs = append(errs, fmt.Errorf("--scale-down-unneeded-time must be positive, got %v", o.UnneededTime))
	}
	if o.Enabled && o.LeaseNamespace == "" {
		errs = append(errs, errors.New("--scale-down-lease-namespace must be set with --scale-down-controller"))
	}
	return errs
}

// scaleDownController builds the controller on the adapter's informers and
// metric values (either --source), registers its event handlers and metrics, and returns what runs
// it under leader election; nil when --scale-down-controller is off.
func (a *Adapter) scaleDownController(pods coreinformers.PodInformer, nodes coreinformers.NodeInformer, loads scaledown.Loads, log *slog.Logger) (func(context.Context), error) {
	o := a.Options
	if !o.ScaleDown.Enabled {
		return nil, nil
	}
	cfg, err := a.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("scale-down controller: %w", err)
	}
	// Its own client: the patch rate limit is the controller's, not
	// client-go's default 5 QPS shared with everything else.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.ScaleDown.PatchQPS)+5, o.ScaleDown.PatchBurst+10
	cfg.UserAgent = "gpuscale-adapter/scale-down"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("scale-down controller: client: %w", err)
	}
	sd := o.ScaleDown
	c, err := scaledown.New(scaledown.Config{
		Client: client, Pods: pods.Lister(), Nodes: nodes.Lister(), Loads: loads,
		IdleTime: sd.IdleTime, Resync: sd.Resync, PatchQPS: sd.PatchQPS, PatchBurst: sd.PatchBurst,
		GPUUtilizationThreshold: sd.GPUUtilizationThreshold, UnneededTime: sd.UnneededTime,
		Logger: log.With("component", "scale-down"),
	})
	if err != nil {
		return nil, err
	}
	if _, err := pods.Informer().AddEventHandler(c.PodHandler()); err != nil {
		return nil, fmt.Errorf("scale-down controller: pod handler: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(c.NodeHandler()); err != nil {
		return nil, fmt.Errorf("scale-down controller: node handler: %w", err)
	}
	legacyregistry.RawMustRegister(c.Collector())
	id := leaderIdentity()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: scaleDownLease, Namespace: sd.LeaseNamespace},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	return func(ctx context.Context) {
		runLeaderElected(ctx, lock, c.Run, log.With("component", "scale-down", "identity", id))
	}, nil
}

// leaderIdentity is the pod's name (POD_NAME, or the hostname a pod gets)
// plus a random suffix, so two processes on one host never share it.
func leaderIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	return name + "_" + string(uuid.NewUUID())
}

// runLeaderElected runs run while this process holds the lease, and
// campaigns again whenever it loses it, until ctx is done. Losing the
// lease stops only the controller, never the metrics API.
func runLeaderElected(ctx context.Context, lock resourcelock.Interface, run func(context.Context), log *slog.Logger) {
	// A new term's loop starts only once the last term's has returned.
	var term sync.Mutex
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, Name: scaleDownLease, ReleaseOnCancel: true,
			LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					term.Lock()
					defer term.Unlock()
					log.Info("acquired the scale-down lease")
					run(ctx)
				},
				OnStoppedLeading: func() { log.Info("not leading the scale-down controller") },
				OnNewLeader:      func(id string) { log.Info("scale-down leader", "leader", id) },
			},
		})
		if err != nil {
			log.Error("scale-down leader election; the controller does not run", "err", err)
			return
		}
		le.Run(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(retryPeriod):
		}
	}
}
