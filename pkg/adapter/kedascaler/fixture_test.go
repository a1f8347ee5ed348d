package kedascaler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	appslisters "k8s.io/client-go/listers/apps/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/adapter/storesource"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

const ns = "team-a"

// world is the real provider over the real store, with informer indexers
// holding a Deployment and a StatefulSet of one Ready pod each.
type world struct {
	store    *store.Store
	provider *provider.Provider
	// reads counts the values the scaler served reads through reader.
	reads atomic.Int64
}

// reader is the world's provider, counting the values read through it.
type reader struct {
	*provider.Provider
	reads *atomic.Int64
}

func (r reader) GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, sel labels.Selector) (*custom_metrics.MetricValue, error) {
	defer r.reads.Add(1)
	return r.Provider.GetMetricByName(ctx, name, info, sel)
}

func (r reader) GetExternalMetric(ctx context.Context, ns string, sel labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	defer r.reads.Add(1)
	return r.Provider.GetExternalMetric(ctx, ns, sel, info)
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
	// A pod serving a model under its Hugging Face id, in no workload.
	must(t, pods.Add(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "hf-0", Labels: map[string]string{"app": "hf"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.1.0.3",
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

// put stores a fresh sample of pod (llm-0, db-0, llm-decode-0 or hf-0)
// serving model.
func (w *world) put(pod string, src signal.Source, model string, sig signal.Signal, v float64) {
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
	clientCA                        *testpki.Authority
}

// identity is a client certificate of the client CA naming user cn in
// groups.
func (p *pki) identity(t *testing.T, cn string, groups ...string) tls.Certificate {
	t.Helper()
	kp, err := p.clientCA.Issue(testpki.Leaf{CommonName: cn, Organization: groups, IPs: testpki.Loopback, Client: true})
	must(t, err)
	c, err := kp.TLS()
	must(t, err)
	return c
}

func newPKI(t *testing.T) *pki {
	t.Helper()
	dir := t.TempDir()
	ca := func(name string) *testpki.Authority {
		a, err := testpki.NewAuthority(name)
		must(t, err)
		return a
	}
	servingCA, clientCA, strangerCA := ca("serving-ca"), ca("keda-client-ca"), ca("stranger-ca")
	p := &pki{dir: dir, servingCA: servingCA.Pool(), clientCA: clientCA, clientCAFile: filepath.Join(dir, "client-ca.crt")}
	serving, err := servingCA.Issue(testpki.Leaf{CommonName: "gpuscale-adapter", IPs: testpki.Loopback, Server: true})
	must(t, err)
	p.certFile, p.keyFile, err = serving.WriteFiles(dir, "tls.crt", "tls.key")
	must(t, err)
	must(t, os.WriteFile(p.clientCAFile, clientCA.CertPEM, 0o600))
	client := func(a *testpki.Authority) tls.Certificate {
		kp, err := a.Issue(testpki.Leaf{CommonName: "keda-operator", IPs: testpki.Loopback, Client: true})
		must(t, err)
		c, err := kp.TLS()
		must(t, err)
		return c
	}
	p.client, p.strangerClient = client(clientCA), client(strangerCA)
	return p
}

// serve starts the scaler on a loopback port, serving every namespace to
// every client the TLS layer admits, and returns its address.
func serve(t *testing.T, w *world, files kedascaler.TLSFiles, requests *kedascaler.Requests) string {
	t.Helper()
	return serveConfig(t, kedascaler.Config{Metrics: reader{w.provider, &w.reads}, TLS: files, CheckInterval: 20 * time.Millisecond, Requests: requests, AllowAllNamespaces: true})
}

// serveConfig starts the scaler configured so on a loopback port and
// returns its address.
func serveConfig(t *testing.T, cfg kedascaler.Config) string {
	t.Helper()
	s, err := kedascaler.NewServer(cfg)
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
