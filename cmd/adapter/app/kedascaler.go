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
	"k8s.io/component-base/metrics/legacyregistry"

	"github.com/gpuscale/gpuscale/pkg/certrotation"
	"github.com/gpuscale/gpuscale/pkg/kedascaler"
)

// KEDAScalerOptions configure the KEDA external scaler port (docs/keda.md).
type KEDAScalerOptions struct {
	Port          int
	BindAddress   string
	ClientCAFile  string
	NoClientAuth  bool
	CheckInterval time.Duration
}

// AddFlags registers the options.
func (o *KEDAScalerOptions) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.Port, "keda-scaler-port", o.Port, "Port serving KEDA's external scaler gRPC protocol (externalscaler.proto) over TLS with the adapter's --tls-cert-file; 0 turns it off (docs/keda.md).")
	fs.StringVar(&o.BindAddress, "keda-scaler-bind-address", o.BindAddress, "Address the KEDA scaler port listens on; empty: every interface.")
	fs.StringVar(&o.ClientCAFile, "keda-scaler-client-ca-file", o.ClientCAFile, "CA bundle verifying client certificates on the KEDA scaler port: only clients holding one it signed (KEDA's operator, with a TriggerAuthentication's tlsClientCert) are served, since the port answers without Kubernetes RBAC. Required with --keda-scaler-port unless --keda-scaler-no-client-auth.")
	fs.BoolVar(&o.NoClientAuth, "keda-scaler-no-client-auth", o.NoClientAuth, "Serve the KEDA scaler port to clients without a certificate: anyone who reaches it reads every namespace's values. Only where a NetworkPolicy or mesh admits KEDA's operator alone.")
	fs.DurationVar(&o.CheckInterval, "keda-scaler-check-interval", o.CheckInterval, "How often StreamIsActive re-reads each trigger's value: the most a change of activity (a model at zero getting its first request) waits before it is pushed to KEDA.")
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
	return errs
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
	requests := kedascaler.NewRequests()
	legacyregistry.RawMustRegister(requests)
	srv, err := kedascaler.NewServer(kedascaler.Config{
		Metrics: metrics, CheckInterval: o.CheckInterval, Requests: requests, Logger: log.With("component", "kedascaler"),
		TLS: creds,
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
