package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscale/gpuscale/pkg/adapter/certrotation"
)

// CertOptions make the adapter keep its own serving certificate (and KEDA's
// client certificate) at runtime, in a Secret, renewed before expiry, with
// the CA bundle written into its APIServices (pkg/adapter/certrotation).
type CertOptions struct {
	Secret        string
	Namespace     string
	Service       string
	ClusterDomain string
	APIServices   []string
	Validity      time.Duration
	CAValidity    time.Duration
	// KEDAClientSecret, NAMESPACE/NAME, is where KEDA's client
	// credentials are written; the scaler port then trusts their CA.
	KEDAClientSecret string
}

func defaultCertOptions() CertOptions {
	return CertOptions{ClusterDomain: "cluster.local", Validity: 90 * 24 * time.Hour, CAValidity: 365 * 24 * time.Hour}
}

// AddFlags registers the options.
func (o *CertOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Secret, "certs-secret", o.Secret, "Keep the serving certificate at runtime in this Secret (created if missing): a CA and a certificate for --certs-service, renewed two thirds into their life and served without a restart, the CA bundle written into --certs-apiservices. Replaces --tls-cert-file and --tls-private-key-file. Replicas share the Secret.")
	fs.StringVar(&o.Namespace, "certs-namespace", o.Namespace, "Namespace of --certs-secret (the adapter's own).")
	fs.StringVar(&o.Service, "certs-service", o.Service, "Name of the adapter's Service in --certs-namespace: the certificate is for NAME, NAME.NAMESPACE, NAME.NAMESPACE.svc and NAME.NAMESPACE.svc.<--certs-cluster-domain>.")
	fs.StringVar(&o.ClusterDomain, "certs-cluster-domain", o.ClusterDomain, "The cluster's DNS domain, for --certs-service's fully qualified name.")
	fs.StringSliceVar(&o.APIServices, "certs-apiservices", o.APIServices, "APIServices whose spec.caBundle is kept to the CA bundle, e.g. v1beta2.custom.metrics.k8s.io,v1beta1.custom.metrics.k8s.io.")
	fs.DurationVar(&o.Validity, "cert-validity", o.Validity, "Validity of the certificates --certs-secret holds.")
	fs.DurationVar(&o.CAValidity, "ca-validity", o.CAValidity, "Validity of their CAs: at least three times --cert-validity. The next CA is trusted beside the current one from two thirds into its life, and signs from halfway between then and its expiry.")
	fs.StringVar(&o.KEDAClientSecret, "keda-scaler-client-secret", o.KEDAClientSecret, "With --certs-secret and --keda-scaler-port: NAMESPACE/NAME of a Secret the adapter keeps for KEDA's operator (ca.crt: the serving CA bundle; tls.crt, tls.key: a client certificate), read by a (Cluster)TriggerAuthentication; the scaler port then requires client certificates of that client CA.")
}

func (o *CertOptions) enabled() bool { return o.Secret != "" }

func (o *CertOptions) validate(keda *KEDAScalerOptions) []error {
	var errs []error
	if !o.enabled() {
		if o.KEDAClientSecret != "" {
			errs = append(errs, errors.New("--keda-scaler-client-secret needs --certs-secret"))
		}
		return errs
	}
	for _, msg := range validation.IsDNS1123Subdomain(o.Secret) {
		errs = append(errs, fmt.Errorf("--certs-secret %q: %s", o.Secret, msg))
	}
	for _, msg := range validation.IsDNS1123Label(o.Namespace) {
		errs = append(errs, fmt.Errorf("--certs-namespace %q: %s", o.Namespace, msg))
	}
	for _, msg := range validation.IsDNS1035Label(o.Service) {
		errs = append(errs, fmt.Errorf("--certs-service %q: %s", o.Service, msg))
	}
	if o.Validity < 3*time.Second || o.CAValidity < 3*o.Validity {
		errs = append(errs, fmt.Errorf("--cert-validity (%v) must be at least 3s and --ca-validity (%v) at least three times it", o.Validity, o.CAValidity))
	}
	if o.KEDAClientSecret != "" {
		if keda.Port == 0 {
			errs = append(errs, errors.New("--keda-scaler-client-secret needs --keda-scaler-port"))
		}
		if keda.ClientCAFile != "" || keda.NoClientAuth {
			errs = append(errs, errors.New("--keda-scaler-client-secret excludes --keda-scaler-client-ca-file and --keda-scaler-no-client-auth"))
		}
		if _, _, err := o.kedaSecret(); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

func (o *CertOptions) kedaSecret() (namespace, name string, err error) {
	return secretRef("--keda-scaler-client-secret", o.KEDAClientSecret)
}

// secretRef parses a flag's NAMESPACE/NAME of a Secret.
func secretRef(flag, value string) (namespace, name string, err error) {
	namespace, name, ok := strings.Cut(value, "/")
	if !ok || len(validation.IsDNS1123Label(namespace)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return "", "", fmt.Errorf("%s %q: want NAMESPACE/NAME", flag, value)
	}
	return namespace, name, nil
}

func (o *CertOptions) dnsNames() []string {
	svc := o.Service + "." + o.Namespace + ".svc"
	return []string{svc, o.Service, o.Service + "." + o.Namespace, svc + "." + o.ClusterDomain}
}

// startCerts starts the certificate manager when --certs-secret is set
// (nil otherwise) and returns once it serves a certificate.
func (a *Adapter) startCerts(ctx context.Context, log *slog.Logger) (*certrotation.Manager, error) {
	o := a.Options.Certs
	if !o.enabled() {
		return nil, nil
	}
	if cert := a.SecureServing.ServerCert.CertKey; cert.CertFile != "" || cert.KeyFile != "" {
		return nil, errors.New("--certs-secret and --tls-cert-file/--tls-private-key-file exclude each other")
	}
	// The API server would otherwise write a self-signed pair into
	// --cert-dir (the read-only root filesystem) before the Manager's
	// replaces it.
	a.SecureServing.ServerCert.CertDirectory = ""
	cfg, err := a.ClientConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mc := certrotation.Config{Client: client, APIServices: certrotation.NewAPIServices(dyn), APIServiceNames: o.APIServices,
		Namespace: o.Namespace, Name: o.Secret, DNSNames: o.dnsNames(), Validity: o.Validity, CAValidity: o.CAValidity,
		Labels: ownedLabels(),
		Logger: log.With("component", "certrotation")}
	if o.KEDAClientSecret != "" {
		ns, name, _ := o.kedaSecret()
		mc.KEDA = &certrotation.KEDAClient{Namespace: ns, Name: name}
	}
	m, err := certrotation.New(mc)
	if err != nil {
		return nil, err
	}
	if err := m.Start(ctx); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	return m, nil
}

// serveCerts makes the API server serve the Manager's certificate, and
// ready only once its CA bundle is where the aggregator reads it.
func serveCerts(m *certrotation.Manager, srv interface {
	AddReadyzChecks(...healthz.HealthChecker) error
}, setCert func()) error {
	if m == nil {
		return nil
	}
	setCert()
	return srv.AddReadyzChecks(healthz.NamedCheck("gpuscale-certificates", func(*http.Request) error { return m.Ready() }))
}
