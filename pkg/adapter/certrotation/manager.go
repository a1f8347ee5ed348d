// Package certrotation keeps a server's certificates at runtime, as KEDA's
// operator keeps its own: a CA and a serving certificate generated into a
// Secret, renewed before they expire, served without a restart, and the CA
// bundle written into the APIServices that route to the server, so that the
// aggregator verifies it. Optionally it keeps a second CA and a client
// certificate for KEDA's operator, mirrored into a Secret in KEDA's
// namespace beside the serving CA bundle, for gpuscale's KEDA scaler port.
//
// Every replica runs a Manager on the same Secret. What to do is decided
// from the Secret's content and the clock alone, and each write is an
// update at the resourceVersion read, so replicas agree without a leader:
// the loser of a race reads again and finds the work done.
//
// A CA is replaced in two steps. Two thirds into its life the next CA is
// added to the bundle (the APIServices' caBundle, KEDA's ca.crt) beside it;
// halfway from then to its expiry the next CA starts signing, and the first
// leaf it signs is served with the new CA cross-signed by the old one, so
// that a peer that has not reloaded its trust yet still verifies it.
// Leaves are renewed two thirds into their life. Nothing is served that a
// peer holding the current bundle cannot verify.
package certrotation

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Config configures a Manager.
type Config struct {
	Client kubernetes.Interface
	// APIServices keeps the caBundle of APIServiceNames; nil with none.
	APIServices     APIServices
	APIServiceNames []string
	// Namespace and Name of the Secret holding the CAs and certificates.
	Namespace, Name string
	// DNSNames the serving certificate is for (the Service's names).
	DNSNames []string
	// Validity of the leaf certificates and of the CAs.
	Validity, CAValidity time.Duration
	// KEDA, if set, also keeps a client CA and KEDA's client certificate.
	KEDA *KEDAClient
	// Resync is how often the APIServices and KEDA's Secret are checked
	// even when nothing changed (default 30s).
	Resync time.Duration
	// Labels are set on the Secrets the Manager creates.
	Labels map[string]string
	Clock  clock.WithTicker
	Logger *slog.Logger
}

// KEDAClient is where KEDA's operator finds its credentials for the scaler
// port: a Secret holding ca.crt (the serving CA bundle, TriggerAuthentication
// parameter caCert), tls.crt and tls.key (its client certificate,
// tlsClientCert and tlsClientKey).
type KEDAClient struct {
	Namespace, Name string
	// CommonName of the client certificate (default keda-operator).
	CommonName string
}

// Manager keeps the certificates; see the package documentation.
type Manager struct {
	cfg     Config
	serving policy
	client  policy
	log     *slog.Logger

	mu         sync.Mutex
	certPEM    []byte
	keyPEM     []byte
	clientCA   []byte
	clientPool *x509.CertPool
	listeners  []dynamiccertificates.Listener

	ready   atomic.Bool
	trigger chan struct{}
}

// New checks cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || len(cfg.DNSNames) == 0 {
		return nil, errors.New("certrotation: Client, Namespace, Name and DNSNames are required")
	}
	if len(cfg.APIServiceNames) > 0 && cfg.APIServices == nil {
		return nil, errors.New("certrotation: APIServiceNames without an APIServices client")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 30 * time.Second
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: cfg, log: cfg.Logger, trigger: make(chan struct{}, 1),
		serving: policy{caName: cfg.Name + "-ca", caValidity: cfg.CAValidity, leafValidity: cfg.Validity,
			leaf: leafSpec{commonName: cfg.DNSNames[0], dnsNames: cfg.DNSNames, usage: x509.ExtKeyUsageServerAuth}}}
	if err := m.serving.validate(); err != nil {
		return nil, fmt.Errorf("certrotation: %w", err)
	}
	if k := cfg.KEDA; k != nil {
		if k.Namespace == "" || k.Name == "" {
			return nil, errors.New("certrotation: KEDA needs the Secret's Namespace and Name")
		}
		if k.CommonName == "" {
			k.CommonName = "keda-operator"
		}
		m.client = policy{caName: cfg.Name + "-client-ca", caValidity: cfg.CAValidity, leafValidity: cfg.Validity,
			leaf: leafSpec{commonName: k.CommonName, usage: x509.ExtKeyUsageClientAuth}}
	}
	return m, nil
}

// Start keeps the certificates until ctx is done. It returns once the
// Secret holds valid certificates and the Manager serves them (the
// APIServices and KEDA's Secret may still be catching up: Ready says
// when), or with ctx's error.
func (m *Manager) Start(ctx context.Context) error {
	next, err := m.syncUntilServing(ctx)
	if err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(m.cfg.Client, 0, informers.WithNamespace(m.cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", m.cfg.Name).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(any, any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}); err != nil {
		return fmt.Errorf("certrotation: %w", err)
	}
	factory.Start(ctx.Done())
	go m.loop(ctx, next)
	return nil
}

// Ready is nil once the served certificate's CA bundle is in every
// APIService.
func (m *Manager) Ready() error {
	if !m.ready.Load() {
		return errors.New("the CA bundle is not yet in every APIService")
	}
	return nil
}

func (m *Manager) poke() {
	select {
	case m.trigger <- struct{}{}:
	default:
	}
}

// syncUntilServing retries the first sync until the certificates are
// served; a failure past that point (an APIService) is left to the loop.
func (m *Manager) syncUntilServing(ctx context.Context) (time.Time, error) {
	backoff := time.Second
	for {
		next, err := m.sync(ctx)
		if err == nil || m.serves() {
			if err != nil {
				m.log.Error("certificates served, but not yet written everywhere", "err", err)
				next = m.cfg.Clock.Now().Add(backoff)
			}
			return next, nil
		}
		m.log.Error("certificates: retrying", "err", err, "in", backoff)
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-m.cfg.Clock.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func (m *Manager) serves() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.certPEM) > 0
}

func (m *Manager) loop(ctx context.Context, next time.Time) {
	backoff := time.Second
	for {
		wait := min(next.Sub(m.cfg.Clock.Now()), m.cfg.Resync)
		t := m.cfg.Clock.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		case <-m.trigger:
			t.Stop()
		}
		n, err := m.sync(ctx)
		if err != nil {
			m.log.Error("certificates: sync failed", "err", err, "retry in", backoff)
			next = m.cfg.Clock.Now().Add(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		next, backoff = n, time.Second
	}
}

// sync brings the Secret up to date, serves what it holds, and writes the
// bundles where they go. It returns when it next needs to run.
func (m *Manager) sync(ctx context.Context) (time.Time, error) {
	data, next, err := m.updateSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	m.serve(data)
	var errs []error
	for _, name := range m.cfg.APIServiceNames {
		if err := m.caBundle(ctx, name, data[servingLayout.bundle]); err != nil {
			errs = append(errs, err)
		}
	}
	// Ready once the aggregator can verify what is served; KEDA's Secret
	// (its namespace may not exist yet) is retried without holding the
	// metrics APIs back.
	m.ready.Store(len(errs) == 0)
	if m.cfg.KEDA != nil {
		if err := m.mirrorKEDA(ctx, data); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return time.Time{}, err
	}
	return next, nil
}

// updateSecret reads the Secret, plans both chains, and writes it back if
// anything changed, reading again on a conflict with another replica.
func (m *Manager) updateSecret(ctx context.Context) (map[string][]byte, time.Time, error) {
	secrets := m.cfg.Client.CoreV1().Secrets(m.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		cur, err := secrets.Get(ctx, m.cfg.Name, metav1.GetOptions{})
		exists := err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return nil, time.Time{}, fmt.Errorf("get Secret %s/%s: %w", m.cfg.Namespace, m.cfg.Name, err)
		}
		data := map[string][]byte{}
		if exists {
			maps.Copy(data, cur.Data)
		}
		changed, next, err := m.plan(data)
		if err != nil {
			return nil, time.Time{}, err
		}
		if !changed {
			return data, next, nil
		}
		if exists {
			upd := cur.DeepCopy()
			upd.Data = data
			_, err = secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager})
		} else {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: m.cfg.Name, Namespace: m.cfg.Namespace, Labels: m.cfg.Labels},
				Type: corev1.SecretTypeOpaque, Data: data}
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: fieldManager})
		}
		switch {
		case err == nil:
			m.log.Info("certificates written", "secret", m.cfg.Namespace+"/"+m.cfg.Name, "renew at", next.UTC().Format(time.RFC3339))
			return data, next, nil
		case (apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err)) && attempt < 5:
			continue // another replica wrote first: plan on what it wrote
		default:
			return nil, time.Time{}, fmt.Errorf("write Secret %s/%s: %w", m.cfg.Namespace, m.cfg.Name, err)
		}
	}
}

const fieldManager = "gpuscale-certrotation"

func (m *Manager) plan(data map[string][]byte) (bool, time.Time, error) {
	now := m.cfg.Clock.Now()
	serving := readChain(data, servingLayout)
	changed, next, err := m.serving.plan(serving, now)
	if err != nil {
		return false, time.Time{}, err
	}
	if changed {
		serving.write(data, servingLayout)
	}
	if m.cfg.KEDA != nil {
		client := readChain(data, clientLayout)
		c, n, err := m.client.plan(client, now)
		if err != nil {
			return false, time.Time{}, err
		}
		if c {
			client.write(data, clientLayout)
		}
		changed, next = changed || c, minTime(next, n)
	}
	return changed, next, nil
}

// serve makes data's serving pair and client CA bundle current, and tells
// the listeners (the API server, the KEDA scaler) when they changed.
func (m *Manager) serve(data map[string][]byte) {
	m.mu.Lock()
	cert, key := data[servingLayout.leafCert], data[servingLayout.leafKey]
	clientCA := data[clientLayout.bundle]
	changed := !bytes.Equal(cert, m.certPEM) || !bytes.Equal(key, m.keyPEM) || !bytes.Equal(clientCA, m.clientCA)
	m.certPEM, m.keyPEM = cert, key
	if !bytes.Equal(clientCA, m.clientCA) {
		m.clientCA, m.clientPool = clientCA, x509.NewCertPool()
		m.clientPool.AppendCertsFromPEM(clientCA)
	}
	listeners := append([]dynamiccertificates.Listener(nil), m.listeners...)
	m.mu.Unlock()
	if changed {
		for _, l := range listeners {
			l.Enqueue()
		}
	}
}

// caBundle writes bundle into an APIService's spec.caBundle unless it is
// there already.
func (m *Manager) caBundle(ctx context.Context, name string, bundle []byte) error {
	cur, err := m.cfg.APIServices.CABundle(ctx, name)
	if err != nil {
		return fmt.Errorf("APIService %s: %w", name, err)
	}
	if bytes.Equal(cur, bundle) {
		return nil
	}
	if err := m.cfg.APIServices.SetCABundle(ctx, name, bundle); err != nil {
		return fmt.Errorf("APIService %s: caBundle: %w", name, err)
	}
	m.log.Info("APIService caBundle updated", "apiservice", name, "cas", len(mustCerts(bundle)))
	return nil
}

// mirrorKEDA writes KEDA's Secret: the serving bundle and the client pair.
func (m *Manager) mirrorKEDA(ctx context.Context, data map[string][]byte) error {
	k := m.cfg.KEDA
	want := map[string][]byte{
		"ca.crt":  data[servingLayout.bundle],
		"tls.crt": data[clientLayout.leafCert],
		"tls.key": data[clientLayout.leafKey],
	}
	secrets := m.cfg.Client.CoreV1().Secrets(k.Namespace)
	cur, err := secrets.Get(ctx, k.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace, Labels: m.cfg.Labels},
			Type: corev1.SecretTypeOpaque, Data: want}
		if _, err := secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create KEDA's Secret %s/%s: %w", k.Namespace, k.Name, err)
		}
		return nil
	case err != nil:
		return fmt.Errorf("get KEDA's Secret %s/%s: %w", k.Namespace, k.Name, err)
	}
	if maps.EqualFunc(cur.Data, want, bytes.Equal) {
		return nil
	}
	upd := cur.DeepCopy()
	upd.Data = want
	if _, err := secrets.Update(ctx, upd, metav1.UpdateOptions{FieldManager: fieldManager}); err != nil {
		return fmt.Errorf("update KEDA's Secret %s/%s: %w", k.Namespace, k.Name, err)
	}
	return nil
}

func mustCerts(b []byte) []*x509.Certificate {
	c, _ := parseCerts(b)
	return c
}

// Serving is the serving certificate, for the API server
// (SecureServingInfo.Cert) and the KEDA scaler.
func (m *Manager) Serving() dynamiccertificates.CertKeyContentProvider { return servingProvider{m} }

// ClientCA is the bundle verifying KEDA's client certificates (empty
// without Config.KEDA).
func (m *Manager) ClientCA() dynamiccertificates.CAContentProvider { return clientCAProvider{m} }

type servingProvider struct{ m *Manager }

func (p servingProvider) Name() string { return "gpuscale-certrotation-serving" }

func (p servingProvider) CurrentCertKeyContent() ([]byte, []byte) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.certPEM, p.m.keyPEM
}

func (p servingProvider) AddListener(l dynamiccertificates.Listener) { p.m.addListener(l) }

type clientCAProvider struct{ m *Manager }

func (p clientCAProvider) Name() string { return "gpuscale-certrotation-client-ca" }

func (p clientCAProvider) CurrentCABundleContent() []byte {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	return p.m.clientCA
}

func (p clientCAProvider) VerifyOptions() (x509.VerifyOptions, bool) {
	p.m.mu.Lock()
	defer p.m.mu.Unlock()
	if p.m.clientPool == nil {
		return x509.VerifyOptions{}, false
	}
	return x509.VerifyOptions{Roots: p.m.clientPool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, true
}

func (p clientCAProvider) AddListener(l dynamiccertificates.Listener) { p.m.addListener(l) }

func (m *Manager) addListener(l dynamiccertificates.Listener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, l)
}

// EncodeCABundle is a bundle as an APIService's caBundle field holds it
// in JSON.
func EncodeCABundle(pemBundle []byte) string { return base64.StdEncoding.EncodeToString(pemBundle) }
