package kedaenv

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
)

// TestPKI: the certificate verifies against the CA as a server for
// 127.0.0.1 (KEDA's operator's gRPC port) and as a client (KEDA's metrics
// server to the operator, KEDA's operator to gpuscale's scaler port).
func TestPKI(t *testing.T) {
	p, err := NewPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	pair, err := tls.X509KeyPair(p.CertPEM, p.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		if _, err := os.Stat(p.Dir + "/" + name); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
