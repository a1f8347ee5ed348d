package certrotation

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/internal/harness/kubefake"
)

const ns = "gpuscale"

var apiServiceNames = []string{"v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"}

func apiServiceObjects() []runtime.Object {
	var out []runtime.Object
	for _, n := range apiServiceNames {
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
			"metadata": map[string]any{"name": n},
			"spec":     map[string]any{"insecureSkipTLSVerify": true, "groupPriorityMinimum": int64(100)},
		}})
	}
	return out
}

type listenerCount struct{ n atomic.Int32 }

func (l *listenerCount) Enqueue() { l.n.Add(1) }

type harness struct {
	client  *kubefake.Clientset
	dyn     *dynamicfake.FakeDynamicClient
	clock   *clocktesting.FakeClock
	m       *Manager
	changes *listenerCount
}

func newHarness(t *testing.T, keda bool) *harness {
	t.Helper()
	h := &harness{client: kubefake.NewClientset(), clock: clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), changes: &listenerCount{}}
	h.dyn = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{apiServiceResource: "APIServiceList"}, apiServiceObjects()...)
	cfg := Config{Client: h.client, APIServices: NewAPIServices(h.dyn), APIServiceNames: apiServiceNames,
		Namespace: ns, Name: "gpuscale-adapter-certs", DNSNames: []string{"gpuscale-adapter", "gpuscale-adapter.gpuscale.svc"},
		Validity: time.Hour, CAValidity: 6 * time.Hour, Clock: h.clock}
	if keda {
		cfg.KEDA = &KEDAClient{Namespace: "keda", Name: "gpuscale-keda-client"}
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.m = m
	m.Serving().AddListener(h.changes)
	return h
}

func (h *harness) secret(t *testing.T, namespace, name string) *corev1.Secret {
	t.Helper()
	s, err := h.client.CoreV1().Secrets(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (h *harness) caBundle(t *testing.T, name string) []byte {
	t.Helper()
	o, err := h.dyn.Resource(apiServiceResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s, _, _ := unstructured.NestedString(o.Object, "spec", "caBundle")
	skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify")
	if skip {
		t.Errorf("APIService %s still skips TLS verification", name)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// servedVerifies: what the Manager serves verifies against bundle for the
// Service's name.
func servedVerifies(t *testing.T, m *Manager, bundle []byte, now time.Time) *x509.Certificate {
	t.Helper()
	certPEM, keyPEM := m.Serving().CurrentCertKeyContent()
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatalf("served pair: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(bundle) {
		t.Fatal("empty bundle")
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	inter := x509.NewCertPool()
	for _, der := range pair.Certificate[1:] {
		c, _ := x509.ParseCertificate(der)
		inter.AddCert(c)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: "gpuscale-adapter.gpuscale.svc", CurrentTime: now}); err != nil {
		t.Fatalf("the served certificate does not verify against the bundle: %v", err)
	}
	return leaf
}

// TestManagerStart: the first start makes the Secret, serves its pair,
// writes its bundle into every APIService (clearing insecureSkipTLSVerify)
// and KEDA's Secret with a client pair the client CA verifies.
func TestManagerStart(t *testing.T) {
	h := newHarness(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Ready(); err != nil {
		t.Fatal(err)
	}
	s := h.secret(t, ns, "gpuscale-adapter-certs")
	for _, name := range apiServiceNames {
		if got := h.caBundle(t, name); string(got) != string(s.Data["ca.crt"]) {
			t.Errorf("APIService %s: caBundle is not the Secret's bundle", name)
		}
	}
	servedVerifies(t, h.m, s.Data["ca.crt"], h.clock.Now())

	k := h.secret(t, "keda", "gpuscale-keda-client")
	if string(k.Data["ca.crt"]) != string(s.Data["ca.crt"]) {
		t.Error("KEDA's ca.crt is not the serving bundle")
	}
	pair, err := tls.X509KeyPair(k.Data["tls.crt"], k.Data["tls.key"])
	if err != nil {
		t.Fatal(err)
	}
	opts, ok := h.m.ClientCA().VerifyOptions()
	if !ok {
		t.Fatal("no client CA")
	}
	opts.CurrentTime = h.clock.Now()
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	if _, err := leaf.Verify(opts); err != nil {
		t.Errorf("KEDA's client certificate does not verify against the scaler's client CA: %v", err)
	}
}

// TestManagerRenews: past two thirds of the leaf's life the Manager
// writes a new leaf, serves it and tells the listeners; a CA change
// reaches the APIServices before any leaf the new CA signed is served.
func TestManagerRenews(t *testing.T) {
	h := newHarness(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := h.m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	first := servedVerifies(t, h.m, h.caBundle(t, apiServiceNames[0]), h.clock.Now())
	seen := map[string]bool{string(first.Raw): true}
	signers := map[string]bool{}
	// Twelve hours in steps of ten minutes: two CA lifetimes.
	for range 72 {
		before := h.changes.n.Load()
		h.clock.Step(10 * time.Minute)
		h.m.poke()
		// The loop syncs on the poke; wait until the served certificate
		// is one the current bundle verifies at the new time.
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			certPEM, _ := h.m.Serving().CurrentCertKeyContent()
			l := mustCerts(certPEM)[0]
			return h.clock.Now().Before(renewAt(l)) || h.changes.n.Load() > before, nil
		}); err != nil {
			t.Fatalf("at %v: no renewal: %v", h.clock.Now(), err)
		}
		if err := wait.PollUntilContextTimeout(ctx, 5*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return h.m.Ready() == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, name := range apiServiceNames {
			l := servedVerifies(t, h.m, h.caBundle(t, name), h.clock.Now())
			seen[string(l.Raw)] = true
		}
		s := h.secret(t, ns, "gpuscale-adapter-certs")
		signers[string(s.Data["ca-signer.crt"])] = true
	}
	if len(seen) < 10 || len(signers) < 2 {
		t.Errorf("%d leaves served and %d signing CAs over two CA lifetimes; want renewals and a CA change", len(seen), len(signers))
	}
}

// TestManagerConflict: a replica that loses the race to write the Secret
// reads it again and serves what the winner wrote.
func TestManagerConflict(t *testing.T) {
	h := newHarness(t, false)
	var conflicts atomic.Int32
	h.client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if conflicts.Add(1) > 1 {
			return false, nil, nil
		}
		// Another replica creates the Secret first.
		other := newHarness(t, false)
		if _, err := other.m.sync(context.Background()); err != nil {
			t.Error(err)
		}
		s := other.secret(t, ns, "gpuscale-adapter-certs")
		if err := h.client.Tracker().Add(s); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), s.Name)
	})
	if _, err := h.m.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := h.secret(t, ns, "gpuscale-adapter-certs")
	certPEM, _ := h.m.Serving().CurrentCertKeyContent()
	if string(certPEM) != string(s.Data["tls.crt"]) {
		t.Error("the losing replica serves its own certificate, not the Secret's")
	}
}

// TestManagerReadyWithoutKEDA: KEDA's namespace missing (KEDA not yet
// installed) is retried, but does not keep the metrics APIs unready.
func TestManagerReadyWithoutKEDA(t *testing.T) {
	h := newHarness(t, true)
	h.client.PrependReactor("create", "secrets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() == "keda" {
			return true, nil, apierrors.NewNotFound(corev1.Resource("namespaces"), "keda")
		}
		return false, nil, nil
	})
	if _, err := h.m.sync(context.Background()); err == nil || !strings.Contains(err.Error(), "KEDA") {
		t.Fatalf("sync: %v, want KEDA's Secret's error", err)
	}
	if err := h.m.Ready(); err != nil {
		t.Errorf("not ready for want of KEDA's namespace: %v", err)
	}
}
