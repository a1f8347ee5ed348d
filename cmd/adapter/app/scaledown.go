package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	componentbaseconfig "k8s.io/component-base/config"
	componentbaseoptions "k8s.io/component-base/config/options"

	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// scaleDownLease is the Lease the adapter replicas elect the scale-down
// controller's leader with (--leader-elect-resource-name's default).
const scaleDownLease = "gpuscale-scale-down"

// leaderHealthzTimeout is how long past its renew deadline a leader that
// has not renewed its lease still counts as live (/livez): client-go's
// healthz adaptor, with kube-controller-manager's 20s.
const leaderHealthzTimeout = 20 * time.Second

// ScaleDownOptions are the scale-down controller's flags. Thresholds and
// timers mirror the cluster autoscaler's flags of the same names.
type ScaleDownOptions struct {
	Enabled bool
	// LeaderElection is component-base's configuration, with its standard
	// flags (--leader-elect, --leader-elect-lease-duration, ...); the
	// replicas elect the one that runs the controller.
	LeaderElection          componentbaseconfig.LeaderElectionConfiguration
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
	// client-go's usual timings, as kube-controller-manager's defaults.
	le := componentbaseconfig.LeaderElectionConfiguration{
		LeaderElect:       true,
		LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
		RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
		RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
		ResourceLock:      resourcelock.LeasesResourceLock,
		ResourceName:      scaleDownLease,
		ResourceNamespace: "gpuscale",
	}
	return ScaleDownOptions{LeaderElection: le, Resync: d.Resync, IdleTime: d.IdleTime,
		PatchQPS: d.PatchQPS, PatchBurst: d.PatchBurst, GPUUtilizationThreshold: d.GPUUtilizationThreshold, UnneededTime: d.UnneededTime}
}

// AddFlags registers the options.
func (o *ScaleDownOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Enabled, "scale-down-controller", o.Enabled, "Run the scale-down controller: deletion costs that empty whole GPU nodes and safe-to-evict protection of serving replicas, for pods labelled gpuscale.io/scale-down=managed. Leader-elected.")
	componentbaseoptions.BindLeaderElectionFlags(&o.LeaderElection, fs)
	// The flag before component-base's: kept for existing deployments.
	fs.StringVar(&o.LeaderElection.ResourceNamespace, "scale-down-lease-namespace", o.LeaderElection.ResourceNamespace, "Namespace of the scale-down controller's leader-election Lease.")
	_ = fs.MarkDeprecated("scale-down-lease-namespace", "use --leader-elect-resource-namespace")
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
	if o.Enabled && o.LeaderElection.LeaderElect {
		errs = append(errs, validateLeaderElection(&o.LeaderElection)...)
	}
	return errs
}

// scaleDownController builds the controller on the adapter's informers and
// metric values (either --source), registers its event handlers and metrics, and returns what runs
// it under leader election, with client-go's healthz adaptor of that
// election (nil with --leader-elect=false); nil when --scale-down-controller is off.
func (a *Adapter) scaleDownController(pods coreinformers.PodInformer, nodes coreinformers.NodeInformer, loads scaledown.Loads, log *slog.Logger) (func(context.Context), *leaderelection.HealthzAdaptor, error) {
	o := a.Options
	if !o.ScaleDown.Enabled {
		return nil, nil, nil
	}
	cfg, err := a.ClientConfig()
	if err != nil {
		return nil, nil, fmt.Errorf("scale-down controller: %w", err)
	}
	// Its own client: the patch rate limit is the controller's, not
	// client-go's default 5 QPS shared with everything else.
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = float32(o.ScaleDown.PatchQPS)+5, o.ScaleDown.PatchBurst+10
	cfg.UserAgent = "gpuscale-adapter/scale-down"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("scale-down controller: client: %w", err)
	}
	sd := o.ScaleDown
	c, err := scaledown.New(scaledown.Config{
		Client: client, Pods: pods.Lister(), Nodes: nodes.Lister(), Loads: loads,
		IdleTime: sd.IdleTime, Resync: sd.Resync, PatchQPS: sd.PatchQPS, PatchBurst: sd.PatchBurst,
		GPUUtilizationThreshold: sd.GPUUtilizationThreshold, UnneededTime: sd.UnneededTime,
		Logger: log.With("component", "scale-down"),
	})
	if err != nil {
		return nil, nil, err
	}
	if _, err := pods.Informer().AddEventHandler(c.PodHandler()); err != nil {
		return nil, nil, fmt.Errorf("scale-down controller: pod handler: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(c.NodeHandler()); err != nil {
		return nil, nil, fmt.Errorf("scale-down controller: node handler: %w", err)
	}
	a.Options.metricsRegisterer().MustRegister(c.Collector())
	le := sd.LeaderElection
	if !le.LeaderElect {
		log.Info("leader election off: this replica runs the scale-down controller", "component", "scale-down")
		return c.Run, nil, nil
	}
	id := leaderIdentity()
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName, client.CoreV1(), client.CoordinationV1(),
		resourcelock.ResourceLockConfig{Identity: id})
	if err != nil {
		return nil, nil, fmt.Errorf("scale-down controller: leader election: %w", err)
	}
	watchdog := leaderelection.NewLeaderHealthzAdaptor(leaderHealthzTimeout)
	return func(ctx context.Context) {
		scaledown.RunLeaderElected(ctx, electionConfig(le, lock, watchdog), c.Run, log.With("component", "scale-down", "identity", id))
	}, watchdog, nil
}

// electionConfig is client-go's configuration from component-base's; the
// callbacks are scaledown.RunLeaderElected's.
func electionConfig(le componentbaseconfig.LeaderElectionConfiguration, lock resourcelock.Interface, watchdog *leaderelection.HealthzAdaptor) leaderelection.LeaderElectionConfig {
	c := leaderelection.LeaderElectionConfig{
		Lock: lock, Name: le.ResourceName, ReleaseOnCancel: true,
		LeaseDuration: le.LeaseDuration.Duration, RenewDeadline: le.RenewDeadline.Duration, RetryPeriod: le.RetryPeriod.Duration,
	}
	if watchdog != nil {
		c.WatchDog = watchdog
	}
	return c
}

// validateLeaderElection checks what client-go would refuse, with the
// flags' names.
func validateLeaderElection(le *componentbaseconfig.LeaderElectionConfiguration) []error {
	var errs []error
	if le.ResourceNamespace == "" || le.ResourceName == "" {
		errs = append(errs, errors.New("--leader-elect-resource-namespace (--scale-down-lease-namespace) and --leader-elect-resource-name must be set with --scale-down-controller"))
	}
	if le.ResourceLock != resourcelock.LeasesResourceLock {
		errs = append(errs, fmt.Errorf("--leader-elect-resource-lock must be %s, got %q", resourcelock.LeasesResourceLock, le.ResourceLock))
	}
	if le.RetryPeriod.Duration <= 0 || le.RenewDeadline.Duration <= le.RetryPeriod.Duration || le.LeaseDuration.Duration <= le.RenewDeadline.Duration {
		errs = append(errs, fmt.Errorf("leader election needs 0 < --leader-elect-retry-period (%v) < --leader-elect-renew-deadline (%v) < --leader-elect-lease-duration (%v)",
			le.RetryPeriod.Duration, le.RenewDeadline.Duration, le.LeaseDuration.Duration))
	}
	return errs
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
