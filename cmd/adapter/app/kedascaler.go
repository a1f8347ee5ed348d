package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/gpuscale/gpuscale/pkg/adapter/certrotation"
	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
)

// KEDAScalerOptions configure the KEDA external scaler port (docs/keda.md).
type KEDAScalerOptions struct {
	Port          int
	BindAddress   string
	ClientCAFile  string
	NoClientAuth  bool
	CheckInterval time.Duration
	// Authorization is AuthorizeSubjectAccessReview or AuthorizeNone;
	// Limits bound connections and streams.
	Authorization string
	Limits        kedascaler.Limits
}

// KEDA scaler authorization modes (--keda-scaler-authorization).
const (
	AuthorizeSubjectAccessReview = "subjectaccessreview"
	AuthorizeNone                = "none"
)

// AddFlags registers the options.
func (o *KEDAScalerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "keda-scaler-port", o.Port, "Port serving KEDA's external scaler gRPC protocol (externalscaler.proto) over TLS with the adapter's --tls-cert-file; 0 turns it off (docs/keda.md).")
	fs.StringVar(&o.BindAddress, "keda-scaler-bind-address", o.BindAddress, "Address the KEDA scaler port listens on; empty: every interface.")
	fs.StringVar(&o.ClientCAFile, "keda-scaler-client-ca-file", o.ClientCAFile, "CA bundle verifying client certificates on the KEDA scaler port: only clients holding one it signed (KEDA's operator, with a TriggerAuthentication's tlsClientCert) are served, since the port answers without Kubernetes RBAC. Required with --keda-scaler-port unless --keda-scaler-no-client-auth.")
	fs.BoolVar(&o.NoClientAuth, "keda-scaler-no-client-auth", o.NoClientAuth, "Serve the KEDA scaler port to clients without a certificate: anyone who reaches it reads every namespace's values. Only where a NetworkPolicy or mesh admits KEDA's operator alone.")
	fs.DurationVar(&o.CheckInterval, "keda-scaler-check-interval", o.CheckInterval, "How often StreamIsActive re-reads each trigger's value: the most a change of activity (a model at zero getting its first request) waits before it is pushed to KEDA.")
	o.addBoundsFlags(fs)
}

// addBoundsFlags registers who may read which namespace, and the bounds
// on connections and streams.
func (o *KEDAScalerOptions) addBoundsFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Authorization, "keda-scaler-authorization", o.Authorization, "Which namespaces a client of the KEDA scaler port may read: subjectaccessreview serves a namespace to a client certificate (Common Name the user, Organizations its groups) only if Kubernetes authorizes that user to read the same metric through custom.metrics.k8s.io or external.metrics.k8s.io there (docs/keda.md); none serves every namespace to every client the TLS layer admits.")
	fs.IntVar(&o.Limits.MaxConnections, "keda-scaler-max-connections", kedascaler.DefaultMaxConnections, "Connections the KEDA scaler port keeps open at most; more are closed when accepted.")
	fs.IntVar(&o.Limits.MaxConnectionsPerAddress, "keda-scaler-max-connections-per-address", kedascaler.DefaultMaxConnectionsPerAddress, "Connections from one client address the KEDA scaler port keeps open at most (raise it behind a proxy or mesh that connects from one address).")
	fs.IntVar(&o.Limits.MaxStreams, "keda-scaler-max-streams", kedascaler.DefaultMaxStreams, "StreamIsActive streams (one per external-push trigger) the KEDA scaler serves at most.")
	fs.IntVar(&o.Limits.MaxStreamsPerNamespace, "keda-scaler-max-streams-per-namespace", kedascaler.DefaultMaxStreamsPerNamespace, "StreamIsActive streams of one namespace's ScaledObjects the KEDA scaler serves at most.")
}

func (o *KEDAScalerOptions) validate(generatedClientCA bool) []error {
	if o.Port == 0 {
		return nil
	}
	var errs []error
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--keda-scaler-port %d is not a port", o.Port))
	}
	switch {
	case o.ClientCAFile == "" && !o.NoClientAuth && !generatedClientCA:
		errs = append(errs, errors.New("--keda-scaler-port needs --keda-scaler-client-ca-file (or, knowingly, --keda-scaler-no-client-auth)"))
	case o.ClientCAFile != "" && o.NoClientAuth:
		errs = append(errs, errors.New("--keda-scaler-client-ca-file and --keda-scaler-no-client-auth exclude each other"))
	}
	if o.CheckInterval < 100*time.Millisecond || o.CheckInterval > time.Minute {
		errs = append(errs, fmt.Errorf("--keda-scaler-check-interval must be within [100ms, 1m], got %v", o.CheckInterval))
	}
	return append(errs, o.validateBounds()...)
}

func (o *KEDAScalerOptions) validateBounds() []error {
	var errs []error
	switch o.Authorization {
	case AuthorizeSubjectAccessReview:
		if o.NoClientAuth {
			errs = append(errs, errors.New("--keda-scaler-authorization=subjectaccessreview authorizes client certificates: it excludes --keda-scaler-no-client-auth (or set --keda-scaler-authorization=none, knowingly)"))
		}
	case AuthorizeNone:
	default:
		errs = append(errs, fmt.Errorf("--keda-scaler-authorization %q: want %s or %s", o.Authorization, AuthorizeSubjectAccessReview, AuthorizeNone))
	}
	for name, v := range map[string]int{"connections": o.Limits.MaxConnections, "connections-per-address": o.Limits.MaxConnectionsPerAddress,
		"streams": o.Limits.MaxStreams, "streams-per-namespace": o.Limits.MaxStreamsPerNamespace} {
		if v < 0 {
			errs = append(errs, fmt.Errorf("--keda-scaler-max-%s must not be negative, got %d", name, v))
		}
	}
	return errs
}

// kedaAuthorizer is the authorizer of the scaler's reads: the metrics
// APIs' own (delegated to the kube-apiserver, with its cache), or none.
func (a *Adapter) kedaAuthorizer() (authorizer.Authorizer, error) {
	if a.Options.KEDAScaler.Authorization == AuthorizeNone {
		return nil, nil
	}
	cfg, err := a.Config()
	if err != nil {
		return nil, err
	}
	if cfg.GenericConfig.Authorization.Authorizer == nil {
		return nil, errors.New("--keda-scaler-authorization=subjectaccessreview needs the adapter's delegated authorization, which is off")
	}
	return cfg.GenericConfig.Authorization.Authorizer, nil
}

// startKEDAScaler listens on the scaler port and serves metrics there until
// ctx is done; a failure of the server cancels ctx with its cause. It
// does nothing when the port is 0.
func (a *Adapter) startKEDAScaler(ctx context.Context, cancel context.CancelCauseFunc, metrics kedascaler.MetricsReader, log *slog.Logger, certs *certrotation.Manager) error {
	o := a.Options.KEDAScaler
	if o.Port == 0 {
		return nil
	}
	cert := a.SecureServing.ServerCert.CertKey
	creds := kedascaler.TLSFiles{CertFile: cert.CertFile, KeyFile: cert.KeyFile, ClientCAFile: o.ClientCAFile, NoClientAuth: o.NoClientAuth}
	if certs != nil {
		creds.Serving = certs.Serving()
		if a.Options.Certs.KEDAClientSecret != "" {
			creds.ClientCA = certs.ClientCA()
		}
	} else if cert.CertFile == "" || cert.KeyFile == "" {
		return errors.New("--keda-scaler-port serves the adapter's certificate: set --tls-cert-file and --tls-private-key-file, or --certs-secret")
	}
	authz, err := a.kedaAuthorizer()
	if err != nil {
		return err
	}
	requests := kedascaler.NewRequests()
	a.Options.metricsRegisterer().MustRegister(requests)
	srv, err := kedascaler.NewServer(kedascaler.Config{
		Metrics: metrics, CheckInterval: o.CheckInterval, Requests: requests, Logger: log.With("component", "kedascaler"),
		TLS:        creds,
		Authorizer: authz, AllowAllNamespaces: authz == nil, Limits: o.Limits,
	})
	if err != nil {
		return err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", net.JoinHostPort(o.BindAddress, strconv.Itoa(o.Port)))
	if err != nil {
		return fmt.Errorf("--keda-scaler-port: %w", err)
	}
	go func() {
		if err := srv.Serve(ctx, lis); err != nil {
			cancel(err)
		}
	}()
	return nil
}
