package kedascaler_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"sync"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/server/dynamiccertificates"

	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// memCreds serves credentials from memory and tells listeners when they
// change, as pkg/adapter/certrotation's Manager does.
type memCreds struct {
	mu               sync.Mutex
	cert, key, caPEM []byte
	listeners        []dynamiccertificates.Listener
}

func (m *memCreds) Name() string { return "test" }

func (m *memCreds) CurrentCertKeyContent() ([]byte, []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cert, m.key
}

func (m *memCreds) CurrentCABundleContent() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.caPEM
}

func (m *memCreds) VerifyOptions() (x509.VerifyOptions, bool) { return x509.VerifyOptions{}, false }

func (m *memCreds) AddListener(l dynamiccertificates.Listener) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.listeners = append(m.listeners, l)
}

func (m *memCreds) set(cert, key, caPEM []byte) {
	m.mu.Lock()
	m.cert, m.key, m.caPEM = cert, key, caPEM
	ls := append([]dynamiccertificates.Listener(nil), m.listeners...)
	m.mu.Unlock()
	for _, l := range ls {
		l.Enqueue()
	}
}

// TestTLSFromProviders: with in-memory credentials (the adapter's
// --certs-secret), a new serving certificate and a new client CA reach
// the next handshake without a restart.
func TestTLSFromProviders(t *testing.T) {
	w := newWorld(t)
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 1)
	first, second := newPKI(t), newPKI(t)
	read := func(p *pki) (cert, key, clientCA []byte) {
		cert, key, clientCA = readFile(t, p.certFile), readFile(t, p.keyFile), readFile(t, p.clientCAFile)
		return
	}
	c, k, ca := read(first)
	creds := &memCreds{}
	creds.set(c, k, ca)
	addr := serve(t, w, kedascaler.TLSFiles{Serving: creds, ClientCA: creds}, nil)
	r := ref(map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"})
	call := func(p *pki, cert *tls.Certificate) error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := dial(t, addr, p.servingCA, cert).IsActive(ctx, r)
		return err
	}
	if err := call(first, &first.client); err != nil {
		t.Fatalf("first credentials: %v", err)
	}
	c, k, ca = read(second)
	creds.set(c, k, ca)
	if err := call(second, &second.client); err != nil {
		t.Errorf("after the change, the new credentials: %v", err)
	}
	if err := call(first, &first.client); err == nil {
		t.Error("after the change, a client trusting only the old serving CA, with the old client CA's certificate, was served")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return b
}
