package federation_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
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
)

// authority is a test CA.
type authority struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newAuthority(t testing.TB, cn string) *authority {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &authority{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf's certificate and key in PEM: a client certificate
// when client, else a serving one for dnsNames and 127.0.0.1.
func (a *authority) issue(t testing.TB, cn string, client bool, dnsNames ...string) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	} else {
		tmpl.DNSNames = dnsNames
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}

func writeFile(t testing.TB, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

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
	servingCA, proxyCA := newAuthority(t, "serving-ca"), newAuthority(t, "front-proxy-ca")
	certPEM, keyPEM := servingCA.issue(t, "backend", false, servingNames...)
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	clientCert, clientKey := proxyCA.issue(t, "front-proxy-client", true)
	files := tlsFiles{ca: writeFile(t, dir, "ca.crt", servingCA.pem),
		cert: writeFile(t, dir, "proxy.crt", clientCert), key: writeFile(t, dir, "proxy.key", clientKey)}
	pool := x509.NewCertPool()
	pool.AddCert(proxyCA.cert)
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
