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
	"k8s.io/client-go/informers"
	appsinformers "k8s.io/client-go/informers/apps/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	basecmd "sigs.k8s.io/custom-metrics-apiserver/pkg/cmd"

	"github.com/gpuscale/gpuscale/pkg/adapter/certrotation"
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

	w, err := a.watch()
	if err != nil {
		return err
	}
	src, err := o.newSource(w.pods, w.namespaces, log)
	if err != nil {
		return err
	}
	p, err := o.newProvider(src, w)
	if err != nil {
		return err
	}
	runScaleDown, leaderHealthz, err := a.scaleDownController(w.pods, w.nodes, src.values, log)
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
	if err := a.buildServer(certs, &firstCycle, leaderHealthz, log); err != nil {
		return err
	}
	// After Server(): the serving certificate's files are settled.
	if err := a.startKEDAScaler(ctx, cancel, p, log, certs); err != nil {
		return fmt.Errorf("KEDA scaler: %w", err)
	}

	go func() {
		w.factory.Start(ctx.Done())
		if !cache.WaitForCacheSync(ctx.Done(), w.synced...) {
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

// watched is what the adapter watches, and what must have synced before
// it serves.
type watched struct {
	factory    informers.SharedInformerFactory
	pods       coreinformers.PodInformer
	nodes      coreinformers.NodeInformer
	deploys    appsinformers.DeploymentInformer
	sets       appsinformers.StatefulSetInformer
	namespaces discovery.NamespaceGetter // nil unless namespace labels decide what is scraped
	synced     []cache.InformerSynced
}

// watch sets the informers up, the pod informer's cache holding only the
// fields the pipeline reads.
func (a *Adapter) watch() (*watched, error) {
	factory, err := a.Informers()
	if err != nil {
		return nil, fmt.Errorf("informers: %w", err)
	}
	w := &watched{factory: factory, pods: factory.Core().V1().Pods(), nodes: factory.Core().V1().Nodes(),
		deploys: factory.Apps().V1().Deployments(), sets: factory.Apps().V1().StatefulSets()}
	if err := w.pods.Informer().SetTransform(a.Options.podTransform()); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	w.synced = []cache.InformerSynced{w.pods.Informer().HasSynced, w.nodes.Informer().HasSynced,
		w.deploys.Informer().HasSynced, w.sets.Informer().HasSynced}
	if a.Options.needsNamespaces() {
		ns := factory.Core().V1().Namespaces()
		w.namespaces = ns.Lister()
		w.synced = append(w.synced, ns.Informer().HasSynced)
	}
	return w, nil
}

// newProvider is the metrics provider over the source's values and the
// informers' listers, with its request counter and the capacity signal's
// parts registered, tracking the pods it serves.
func (o *Options) newProvider(src *source, w *watched) (*provider.Provider, error) {
	requests := provider.NewRequestCounter()
	o.metricsRegisterer().MustRegister(requests)
	capacityMetrics := capacity.NewMetrics()
	o.metricsRegisterer().MustRegister(capacityMetrics.Collectors()...)
	p := provider.New(provider.Config{
		Values: src.values, Pods: w.pods.Lister(), Nodes: w.nodes.Lister(), Deployments: w.deploys.Lister(), StatefulSets: w.sets.Lister(),
		MaxStaleness: o.MaxStaleness, TTFTWindow: o.TTFTWindow, Observer: requests,
		Capacity: capacity.New(o.capacityConfig(), capacityMetrics),
		CapacityByRole: map[provider.Role]provider.CapacityEstimator{
			provider.RolePrefill: capacity.New(provider.RoleCapacityConfig(o.capacityConfig(), provider.RolePrefill), capacityMetrics),
			provider.RoleDecode:  capacity.New(provider.RoleCapacityConfig(o.capacityConfig(), provider.RoleDecode), capacityMetrics),
		},
	})
	if err := p.TrackPods(w.pods.Informer()); err != nil {
		return nil, err
	}
	return p, nil
}

// buildServer builds the API server with its handler chain, its readiness
// on the first scrape cycle, its liveness on the scale-down lease (when a
// controller runs) and its certificates.
func (a *Adapter) buildServer(certs *certrotation.Manager, firstCycle *atomic.Bool, leaderHealthz *leaderelection.HealthzAdaptor, log *slog.Logger) error {
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
	return nil
}
