package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/tools/cache"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// Adapter is the gpuscale metrics adapter: custom-metrics-apiserver's
// AdapterBase plus gpuscale's pipeline.
type Adapter struct {
	basecmd.AdapterBase
	Options *Options
	// Log is the adapter's logger (ApplyLogging's); nil: slog's default.
	Log *slog.Logger
}

// NewAdapter returns an adapter with its flags installed.
func NewAdapter() *Adapter {
	a := &Adapter{Options: NewOptions()}
	a.Name = "gpuscale-adapter"
	// A flag set of its own rather than pflag.CommandLine: errors come
	// back to Command.Execute, and each NewAdapter has its flags.
	a.FlagSet = pflag.NewFlagSet(a.Name, pflag.ContinueOnError)
	a.InstallFlags()
	a.Options.AddFlags(a.Flags())
	return a
}

// Run builds the pipeline and serves until ctx is done.
func (a *Adapter) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	o := a.Options
	o.Complete()
	if err := o.Validate(); err != nil {
		return fmt.Errorf("invalid flags: %w", err)
	}
	log := a.Log
	if log == nil {
		log = slog.Default()
	}
	setMemoryLimit(ctx, o.MemoryLimitRatio, keptConnReserve(o), memlimit.FromCgroup, log)
	setGCPercent(o.GCPercent, os.LookupEnv, log)
	if err := setResponseCompression(defaultFeatureGate(), o.ResponseCompression, log); err != nil {
		return err
	}

	factory, err := a.Informers()
	if err != nil {
		return fmt.Errorf("informers: %w", err)
	}
	pods := factory.Core().V1().Pods()
	if err := pods.Informer().SetTransform(o.podTransform()); err != nil {
		return fmt.Errorf("pod informer transform: %w", err)
	}
	nodes := factory.Core().V1().Nodes()
	deploys := factory.Apps().V1().Deployments()
	sets := factory.Apps().V1().StatefulSets()
	synced := []cache.InformerSynced{pods.Informer().HasSynced, nodes.Informer().HasSynced,
		deploys.Informer().HasSynced, sets.Informer().HasSynced}

	// Namespace labels are watched only when they decide what is scraped.
	var namespaces discovery.NamespaceGetter
	if o.needsNamespaces() {
		ns := factory.Core().V1().Namespaces()
		namespaces = ns.Lister()
		synced = append(synced, ns.Informer().HasSynced)
	}
	src, err := o.newSource(pods, namespaces, log)
	if err != nil {
		return err
	}
	requests := provider.NewRequestCounter()
	o.metricsRegisterer().MustRegister(requests)

	capacityMetrics := capacity.NewMetrics()
	o.metricsRegisterer().MustRegister(capacityMetrics.Collectors()...)
	p := provider.New(provider.Config{
		Values: src.values, Pods: pods.Lister(), Nodes: nodes.Lister(), Deployments: deploys.Lister(), StatefulSets: sets.Lister(),
		MaxStaleness: o.MaxStaleness, TTFTWindow: o.TTFTWindow, Observer: requests,
		Capacity: capacity.New(o.capacityConfig(), capacityMetrics),
		CapacityByRole: map[provider.Role]provider.CapacityEstimator{
			provider.RolePrefill: capacity.New(provider.RoleCapacityConfig(o.capacityConfig(), provider.RolePrefill), capacityMetrics),
			provider.RoleDecode:  capacity.New(provider.RoleCapacityConfig(o.capacityConfig(), provider.RoleDecode), capacityMetrics),
		},
	})
	if err := p.TrackPods(pods.Informer()); err != nil {
		return err
	}
	runScaleDown, leaderHealthz, err := a.scaleDownController(pods, nodes, src.values, log)
	if err != nil {
		return err
	}
	// Federation (off by default): names gpuscale does not serve go to
	// --forward-to.
	served, runForward, err := o.Forward.wrap(p, o.metricsRegisterer(), log.With("component", "federation"))
	if err != nil {
		return err
	}
	if runForward != nil {
		go runForward(ctx)
	}
	a.WithCustomMetrics(served)
	a.WithExternalMetrics(served)

	// Ready once the caches are synced and (embedded) one scrape cycle has
	// filled the store: before that every answer would be a misleading
	// NotFound.
	var firstCycle atomic.Bool
	if err := a.startExporterTokenSecret(ctx, log); err != nil {
		return fmt.Errorf("exporter token Secret: %w", err)
	}
	certs, err := a.startCerts(ctx, log)
	if err != nil {
		return err
	}
	if err := a.wrapHandler(); err != nil {
		return err
	}
	if err := shareListItems(log); err != nil {
		return err
	}
	server, err := a.Server()
	if err != nil {
		return fmt.Errorf("build API server: %w", err)
	}
	if err := server.GenericAPIServer.AddReadyzChecks(healthz.NamedCheck("gpuscale-first-scrape", func(*http.Request) error {
		if !firstCycle.Load() {
			return fmt.Errorf("caches not synced or first scrape cycle not finished")
		}
		return nil
	})); err != nil {
		return fmt.Errorf("readyz check: %w", err)
	}
	// A leader that stopped renewing its lease fails /livez (and is
	// restarted); /readyz is left alone, so that losing the lease never
	// stops the metrics API.
	if leaderHealthz != nil {
		if err := server.GenericAPIServer.AddLivezChecks(0, leaderHealthz); err != nil {
			return fmt.Errorf("livez check: %w", err)
		}
	}
	if err := serveCerts(certs, server.GenericAPIServer, func() { server.GenericAPIServer.SecureServingInfo.Cert = certs.Serving() }); err != nil {
		return fmt.Errorf("certificates: %w", err)
	}
	// After Server(): the serving certificate's files are settled.
	if err := a.startKEDAScaler(ctx, cancel, p, log, certs); err != nil {
		return fmt.Errorf("KEDA scaler: %w", err)
	}

	go func() {
		factory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), synced...) {
			return
		}
		log.Info("informer caches synced", "source", o.Source)
		if runScaleDown != nil {
			go runScaleDown(ctx)
		}
		src.loop(ctx, func() { firstCycle.Store(true) })
	}()
	if err := a.AdapterBase.Run(ctx); err != nil {
		return err
	}
	// A failed KEDA scaler stopped the adapter; a signal is no error.
	if cause := context.Cause(ctx); cause != ctx.Err() {
		return fmt.Errorf("KEDA scaler: %w", cause)
	}
	return nil
}
