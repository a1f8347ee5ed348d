package app

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"

	"github.com/gpuscale/gpuscale/pkg/adapter/writebuffer"
	"github.com/gpuscale/gpuscale/pkg/adapter/zerocopy"
	"github.com/gpuscale/gpuscale/pkg/provider"
)

// setResponseCompression turns the generic API server's response gzip on or
// off for the whole process (it is a feature gate there, read per request).
// Kubernetes turns it on by default for answers over 128 KiB, which suits
// clients across a WAN. The adapter's clients are the aggregator, in the
// same cluster network: at 10,000 pods an answer is about 0.9 MB, gzip costs
// about a quarter of a list's CPU, and the aggregator passes the compressed
// bytes on for its client to inflate again (docs/performance.md, "Writes
// coalesced under the filters, and no gzip"). In-cluster Kubernetes
// clients drop it for the same reason (client-go's DisableCompression,
// kubectl --disable-compression).
func setResponseCompression(gate featuregate.MutableFeatureGate, on bool, log *slog.Logger) error {
	if err := gate.SetFromMap(map[string]bool{string(features.APIResponseCompression): on}); err != nil {
		return fmt.Errorf("response compression: %w", err)
	}
	log.Info("response compression", "gzip", on)
	return nil
}

// defaultFeatureGate is the gate the generic API server reads.
func defaultFeatureGate() featuregate.MutableFeatureGate {
	return utilfeature.DefaultMutableFeatureGate
}

// wrapHandler puts, inside the generic API server's filter chain, a write
// buffer under every filter's response-writer wrapper
// (pkg/adapter/writebuffer), and under it the recycling of list items,
// which the answer is encoded from before the handler returns
// (provider.Recycle). Call it before Server().
func (a *Adapter) wrapHandler() error {
	cfg, err := a.Config()
	if err != nil {
		return fmt.Errorf("API server config: %w", err)
	}
	build := cfg.GenericConfig.BuildHandlerChainFunc
	cfg.GenericConfig.BuildHandlerChainFunc = func(h http.Handler, c *genericapiserver.Config) http.Handler {
		return build(writebuffer.Handler(provider.Recycle(h)), c)
	}
	return nil
}

// shareListItems has the served v1beta2 lists share their items with the
// lists the provider builds instead of copying them (pkg/adapter/zerocopy),
// in the scheme custom-metrics-apiserver encodes with. Where a release of
// k8s.io/metrics lays the two types out differently, the copy stays. The
// scheme is the library's, one per process, and API servers read it while
// they serve: it is changed once, before the first is built.
func shareListItems(log *slog.Logger) error {
	shareOnce.Do(func() { shared, shareErr = zerocopy.Register(cmapiserver.Scheme) })
	if shareErr != nil {
		return shareErr
	}
	log.Info("custom metrics lists converted to v1beta2 without a copy", "shared", shared)
	return nil
}

var (
	shareOnce sync.Once
	shared    bool
	shareErr  error
)
