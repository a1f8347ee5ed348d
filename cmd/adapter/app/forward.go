package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/federation"
)

// ForwardOptions configure federation: metric names gpuscale does not
// serve go to another metrics API server (docs/federation.md).
type ForwardOptions struct {
	URL               string
	CAFile            string
	ClientCertFile    string
	ClientKeyFile     string
	Timeout           time.Duration
	DiscoveryInterval time.Duration
}

func defaultForwardOptions() ForwardOptions {
	return ForwardOptions{Timeout: 5 * time.Second, DiscoveryInterval: time.Minute}
}

// AddFlags registers the options.
func (o *ForwardOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.URL, "forward-to", o.URL, "Another metrics API server (prometheus-adapter's, KEDA's, a vendor's), as https://NAME.NAMESPACE.svc:PORT: custom and external metric names gpuscale does not serve are forwarded to it, with the caller's identity, and its names join gpuscale's discovery. gpuscale's own names always win. Empty: off.")
	fs.StringVar(&o.CAFile, "forward-ca-file", o.CAFile, "CA bundle verifying --forward-to's serving certificate, for the host named in --forward-to; empty: the system roots.")
	fs.StringVar(&o.ClientCertFile, "forward-client-cert-file", o.ClientCertFile, "Front-proxy client certificate presented to --forward-to, which must trust it as a request-header authenticator (its --requestheader-client-ca-file and allowed names); re-read when it changes.")
	fs.StringVar(&o.ClientKeyFile, "forward-client-key-file", o.ClientKeyFile, "Key of --forward-client-cert-file.")
	fs.DurationVar(&o.Timeout, "forward-timeout", o.Timeout, "Deadline of one forwarded request or discovery.")
	fs.DurationVar(&o.DiscoveryInterval, "forward-discovery-interval", o.DiscoveryInterval, "How often --forward-to's metric names are discovered; a failed discovery drops them from gpuscale's lists until the next success.")
}

func (o *ForwardOptions) enabled() bool { return o.URL != "" }

func (o *ForwardOptions) validate() []error {
	if !o.enabled() {
		return nil
	}
	var errs []error
	if u, err := url.Parse(o.URL); err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		errs = append(errs, fmt.Errorf("--forward-to %q: want https://NAME.NAMESPACE.svc:PORT", o.URL))
	}
	if o.ClientCertFile == "" || o.ClientKeyFile == "" {
		errs = append(errs, errors.New("--forward-to needs --forward-client-cert-file and --forward-client-key-file: without a front-proxy client certificate the backend cannot take the caller's identity"))
	}
	if o.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("--forward-timeout must be positive, got %v", o.Timeout))
	}
	if o.DiscoveryInterval < time.Second {
		errs = append(errs, fmt.Errorf("--forward-discovery-interval must be at least 1s, got %v", o.DiscoveryInterval))
	}
	return errs
}

// wrap returns local itself when federation is off, else a provider that
// forwards every other name, and the loop that refreshes its discovery.
func (o *ForwardOptions) wrap(local cmprovider.MetricsProvider, reg prometheus.Registerer, log *slog.Logger) (cmprovider.MetricsProvider, func(context.Context), error) {
	if !o.enabled() {
		return local, nil, nil
	}
	backend, err := federation.NewBackend(federation.BackendConfig{URL: o.URL, CAFile: o.CAFile,
		ClientCertFile: o.ClientCertFile, ClientKeyFile: o.ClientKeyFile, Timeout: o.Timeout})
	if err != nil {
		return nil, nil, fmt.Errorf("--forward-to: %w", err)
	}
	metrics := federation.NewMetrics()
	reg.MustRegister(metrics.Collectors()...)
	p := federation.New(local, backend, metrics, log)
	return p, func(ctx context.Context) { p.Run(ctx, o.DiscoveryInterval) }, nil
}
