package kedascaler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// TLSFiles are the scaler's credentials. The serving pair is the adapter's
// own (--tls-cert-file, --tls-private-key-file); ClientCAFile verifies
// client certificates, so that only KEDA's operator, which holds one, reads
// values that this port serves without Kubernetes RBAC.
type TLSFiles struct {
	CertFile, KeyFile string
	// ClientCAFile is required unless NoClientAuth.
	ClientCAFile string
	// NoClientAuth serves TLS to any client: whoever reaches the port
	// reads every namespace's values. Only for networks where a
	// NetworkPolicy or mesh already admits nothing but KEDA.
	NoClientAuth bool
	// Serving and ClientCA, when set, replace the files: credentials kept
	// in memory and renewed at runtime (pkg/adapter/certrotation), whose changes
	// reach new connections at once.
	Serving  dynamiccertificates.CertKeyContentProvider
	ClientCA dynamiccertificates.CAContentProvider
}

func (f TLSFiles) validate() error {
	var errs []error
	if f.Serving == nil && (f.CertFile == "" || f.KeyFile == "") {
		errs = append(errs, errors.New("a serving certificate and key are required"))
	}
	clientCA := f.ClientCAFile != "" || f.ClientCA != nil
	if !clientCA && !f.NoClientAuth {
		errs = append(errs, errors.New("a client CA file is required (or client authentication turned off explicitly)"))
	}
	if clientCA && f.NoClientAuth {
		errs = append(errs, errors.New("a client CA file and no client authentication exclude each other"))
	}
	return errors.Join(errs...)
}

// tlsReloader holds the TLS configuration built from the files' current
// content; dynamiccertificates watches the files and calls Enqueue when
// one changes, so a rotated certificate (cert-manager, say) is served
// without a restart.
type tlsReloader struct {
	serving  dynamiccertificates.CertKeyContentProvider
	clientCA dynamiccertificates.CAContentProvider // nil: no client auth
	config   atomic.Pointer[tls.Config]
	log      *slog.Logger
}

func newTLSReloader(f TLSFiles, log *slog.Logger) (*tlsReloader, error) {
	if err := f.validate(); err != nil {
		return nil, err
	}
	r := &tlsReloader{serving: f.Serving, clientCA: f.ClientCA, log: log}
	if r.serving == nil {
		serving, err := dynamiccertificates.NewDynamicServingContentFromFiles("keda-scaler-serving", f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("serving certificate: %w", err)
		}
		r.serving = serving
	}
	if r.clientCA == nil && !f.NoClientAuth {
		clientCA, err := dynamiccertificates.NewDynamicCAContentFromFile("keda-scaler-client-ca", f.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("client CA: %w", err)
		}
		r.clientCA = clientCA
	}
	if err := r.rebuild(); err != nil {
		return nil, err
	}
	r.serving.AddListener(r)
	if r.clientCA != nil {
		r.clientCA.AddListener(r)
	}
	return r, nil
}

// run watches the files (providers that do not read files need no
// watching) until ctx is done.
func (r *tlsReloader) run(ctx context.Context) {
	if c, ok := r.serving.(dynamiccertificates.ControllerRunner); ok {
		go c.Run(ctx, 1)
	}
	if c, ok := r.clientCA.(dynamiccertificates.ControllerRunner); ok {
		go c.Run(ctx, 1)
	}
}

// Enqueue implements dynamiccertificates.Listener. A broken new file
// keeps the last good configuration.
func (r *tlsReloader) Enqueue() {
	if err := r.rebuild(); err != nil {
		r.log.Error("KEDA scaler: keeping the previous TLS configuration", "err", err)
		return
	}
	r.log.Info("KEDA scaler: TLS files reloaded")
}

func (r *tlsReloader) rebuild() error {
	certPEM, keyPEM := r.serving.CurrentCertKeyContent()
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// gRPC clients require ALPN h2; a config returned from
		// GetConfigForClient must name it itself.
		NextProtos: []string{"h2"},
	}
	if r.clientCA != nil {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(r.clientCA.CurrentCABundleContent()) {
			return errors.New("client CA: no certificate in the file")
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	r.config.Store(cfg)
	return nil
}

// serverConfig is the configuration whose GetConfigForClient hands each
// handshake the current one.
func (r *tlsReloader) serverConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"h2"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return r.config.Load(), nil
		},
	}
}
