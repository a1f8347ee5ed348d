package kedascaler_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/gpuscale/gpuscale/pkg/capacity"
	"github.com/gpuscale/gpuscale/pkg/kedascaler"
	pb "github.com/gpuscale/gpuscale/pkg/kedascaler/externalscaler"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/store"
	"github.com/gpuscale/gpuscale/pkg/storesource"
)

const ns = "team-a"

// world is the real provider over the real store, with informer indexers
// holding a Deployment and a StatefulSet of one Ready pod each.
type world struct {
	store    *store.Store
	provider *provider.Provider
}

func newWorld(t *testing.T) *world {
	t.Helper()
	idx := func() cache.Indexer {
		return cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	}
	pods, nodes, deploys, sets := idx(), idx(), idx(), idx()
	for _, w := range []struct{ name, app string }{{"llm", "llm"}, {"db", "db"}} {
		sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.app}}
		meta := metav1.ObjectMeta{Namespace: ns, Name: w.name}
		if w.name == "llm" {
			must(t, deploys.Add(&appsv1.Deployment{ObjectMeta: meta, Spec: appsv1.DeploymentSpec{Selector: sel}}))
		} else {
			must(t, sets.Add(&appsv1.StatefulSet{ObjectMeta: meta, Spec: appsv1.StatefulSetSpec{Selector: sel}}))
		}
		must(t, pods.Add(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: w.name + "-0", Labels: map[string]string{"app": w.app}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.1",
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}))
	}
	// A decode pod of llm-d's, in no workload: the per-role scope.
	must(t, pods.Add(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm-decode-0", Labels: map[string]string{"app": "llm-decode", "llm-d.ai/role": "decode"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.2",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}))
	st := store.New(30)
	p := provider.New(provider.Config{
		Values: storesource.New(st, time.Minute, time.Minute, nil),
		Pods:   corelisters.NewPodLister(pods), Nodes: corelisters.NewNodeLister(nodes),
		Deployments: appslisters.NewDeploymentLister(deploys), StatefulSets: appslisters.NewStatefulSetLister(sets),
		MaxStaleness: time.Minute, TTFTWindow: time.Minute,
		Capacity: capacity.New(capacity.DefaultConfig(), capacity.NewMetrics()),
		CapacityByRole: map[provider.Role]provider.CapacityEstimator{
			provider.RolePrefill: capacity.New(capacity.DefaultConfig(), nil),
			provider.RoleDecode:  capacity.New(capacity.DefaultConfig(), nil),
		},
	})
	return &world{store: st, provider: p}
}

// put stores a fresh sample of pod (llm-0 or db-0) serving model.
func (w *world) put(pod string, src store.Source, model string, sig store.Signal, v float64) {
	s := store.Sample{Time: time.Now(), Model: model}
	s.Set(sig, v)
	w.store.PutPod(store.Key{Namespace: ns, Name: pod}, src, s)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pki is a serving CA with a certificate for 127.0.0.1, the CA trusted for
// clients with a client certificate it signed, and a client certificate of
// another CA.
type pki struct {
	dir                             string
	servingCA                       *x509.CertPool
	certFile, keyFile, clientCAFile string
	client, strangerClient          tls.Certificate
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	servingCA, servingCAKey := newCA(t, "serving-ca")
	clientCA, clientCAKey := newCA(t, "keda-client-ca")
	strangerCA, strangerCAKey := newCA(t, "stranger-ca")
	p := &pki{dir: dir, servingCA: x509.NewCertPool(),
		certFile: filepath.Join(dir, "tls.crt"), keyFile: filepath.Join(dir, "tls.key"), clientCAFile: filepath.Join(dir, "client-ca.crt")}
	p.servingCA.AddCert(servingCA)
	certPEM, keyPEM := issue(t, servingCA, servingCAKey, "gpuscale-adapter", false)
	must(t, os.WriteFile(p.certFile, certPEM, 0o600))
	must(t, os.WriteFile(p.keyFile, keyPEM, 0o600))
	must(t, os.WriteFile(p.clientCAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: clientCA.Raw}), 0o600))
	var err error
	p.client, err = tls.X509KeyPair(issue(t, clientCA, clientCAKey, "keda-operator", true))
	must(t, err)
	p.strangerClient, err = tls.X509KeyPair(issue(t, strangerCA, strangerCAKey, "keda-operator", true))
	must(t, err)
	return p
}

func newCA(t *testing.T, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	must(t, err)
	cert, err := x509.ParseCertificate(der)
	must(t, err)
	return cert, key
}

func issue(t *testing.T, ca *x509.Certificate, caKey *ecdsa.PrivateKey, cn string, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(t, err)
	usage := x509.ExtKeyUsageServerAuth
	if client {
		usage = x509.ExtKeyUsageClientAuth
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	must(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}

// serve starts the scaler on a loopback port and returns its address.
func serve(t *testing.T, w *world, files kedascaler.TLSFiles, requests *kedascaler.Requests) string {
	t.Helper()
	s, err := kedascaler.NewServer(kedascaler.Config{Metrics: w.provider, TLS: files, CheckInterval: 20 * time.Millisecond, Requests: requests})
	must(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

// dial connects as KEDA does (grpc-go, TLS verifying the server); cert
// nil: no client certificate.
func dial(t *testing.T, addr string, roots *x509.CertPool, cert *tls.Certificate) pb.ExternalScalerClient {
	t.Helper()
	cfg := &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	must(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return pb.NewExternalScalerClient(conn)
}
