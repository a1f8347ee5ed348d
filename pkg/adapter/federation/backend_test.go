package federation_test

import (
	"crypto/tls"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// seen is one request as the backend received it.
type seen struct {
	path, query string
	header      http.Header
	clientCN    string
}

// answer is what the backend says to a path.
type answer struct {
	code   int
	body   any
	delay  time.Duration
	header http.Header
	// raw, when set, is written as the body instead of body's JSON.
	raw []byte
}

// fakeBackend is a metrics API server over TLS on loopback that demands a
// client certificate from the front-proxy CA, as a real one configured
// with --requestheader-client-ca-file does, records every request, and
// answers from a table of paths.
type fakeBackend struct {
	srv *httptest.Server
	mu  sync.Mutex
	got []seen
	ans map[string]answer
}

// tlsFiles are a backend's serving CA and gpuscale's client credentials.
type tlsFiles struct{ ca, cert, key string }

func newFakeBackend(t testing.TB, servingNames ...string) (*fakeBackend, tlsFiles) {
	t.Helper()
	dir := t.TempDir()
	servingCA, err := testpki.NewAuthority("serving-ca")
	if err != nil {
		t.Fatal(err)
	}
	proxyCA, err := testpki.NewAuthority("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	serving, err := servingCA.Issue(testpki.Leaf{CommonName: "backend", DNSNames: servingNames, IPs: testpki.Loopback, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	pair, err := serving.TLS()
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := proxyCA.Issue(testpki.Leaf{CommonName: "front-proxy-client", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	files := tlsFiles{ca: filepath.Join(dir, "ca.crt")}
	if err := os.WriteFile(files.ca, servingCA.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if files.cert, files.key, err = proxy.WriteFiles(dir, "proxy.crt", "proxy.key"); err != nil {
		t.Fatal(err)
	}
	pool := proxyCA.Pool()
	b := &fakeBackend{ans: map[string]answer{}}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(b.serve))
	b.srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pool, MinVersion: tls.VersionTLS12}
	b.srv.StartTLS()
	t.Cleanup(b.srv.Close)
	return b, files
}

// url is the backend's address under a name its certificate holds.
func (b *fakeBackend) url(host string) string {
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(b.srv.URL, "https://"))
	return "https://" + net.JoinHostPort(host, port)
}

func (b *fakeBackend) set(path string, a answer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ans[path] = a
}

func (b *fakeBackend) requests() []seen {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]seen(nil), b.got...)
}

func (b *fakeBackend) serve(w http.ResponseWriter, r *http.Request) {
	s := seen{path: r.URL.Path, query: r.URL.RawQuery, header: r.Header.Clone()}
	if len(r.TLS.PeerCertificates) > 0 {
		s.clientCN = r.TLS.PeerCertificates[0].Subject.CommonName
	}
	b.mu.Lock()
	b.got = append(b.got, s)
	a, ok := b.ans[r.URL.Path]
	b.mu.Unlock()
	if !ok {
		a = answer{code: http.StatusNotFound, body: status(http.StatusNotFound, metav1.StatusReasonNotFound, "the server could not find the requested resource")}
	}
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-r.Context().Done():
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.WriteHeader(a.code)
	if a.raw != nil {
		_, _ = w.Write(a.raw)
		return
	}
	_ = json.NewEncoder(w).Encode(a.body)
}

func status(code int32, reason metav1.StatusReason, msg string) *metav1.Status {
	return &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusFailure, Code: code, Reason: reason, Message: msg}
}
