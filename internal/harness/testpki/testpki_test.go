package testpki_test

import (
	"crypto/x509"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

func newAuthority(t *testing.T, cn string) *testpki.Authority {
	t.Helper()
	a, err := testpki.NewAuthority(cn)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestIssue: a certificate verifies against its authority, and only its
// authority, for exactly the usages and names it was issued for.
func TestIssue(t *testing.T) {
	ca, other := newAuthority(t, "test-ca"), newAuthority(t, "other-ca")
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("authority: IsCA %v, subject %v", ca.Cert.IsCA, ca.Cert.Subject)
	}
	if ca.Cert.SerialNumber.Cmp(other.Cert.SerialNumber) == 0 {
		t.Error("two authorities share a serial number")
	}
	server, client := x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth
	tests := []struct {
		name   string
		leaf   testpki.Leaf
		usages map[x509.ExtKeyUsage]bool
		names  []string // verify as a server for each
		not    string   // a name it must not verify for
	}{
		{"server", testpki.Leaf{CommonName: "backend", DNSNames: []string{"backend.ns.svc", "localhost"}, IPs: testpki.Loopback, Server: true},
			map[x509.ExtKeyUsage]bool{server: true, client: false}, []string{"backend.ns.svc", "localhost", "127.0.0.1"}, "other.ns.svc"},
		{"client with groups", testpki.Leaf{CommonName: "alice", Organization: []string{"team-a", "system:masters"}, Client: true},
			map[x509.ExtKeyUsage]bool{server: false, client: true}, nil, ""},
		{"server and client", testpki.Leaf{CommonName: "keda-operator", IPs: testpki.Loopback, Server: true, Client: true},
			map[x509.ExtKeyUsage]bool{server: true, client: true}, []string{"127.0.0.1"}, "localhost"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kp, err := ca.Issue(tt.leaf)
			if err != nil {
				t.Fatal(err)
			}
			pair, err := kp.TLS()
			if err != nil {
				t.Fatalf("key pair: %v", err)
			}
			cert, err := x509.ParseCertificate(pair.Certificate[0])
			if err != nil {
				t.Fatal(err)
			}
			if cert.Subject.CommonName != tt.leaf.CommonName || !slices.Equal(cert.Subject.Organization, tt.leaf.Organization) {
				t.Errorf("subject %v, want CN=%s O=%v", cert.Subject, tt.leaf.CommonName, tt.leaf.Organization)
			}
			if cert.IsCA {
				t.Error("a leaf is a CA")
			}
			if left := time.Until(cert.NotAfter); left < testpki.Validity-time.Minute || left > testpki.Validity {
				t.Errorf("valid for another %v, want %v", left, testpki.Validity)
			}
			for usage, ok := range tt.usages {
				_, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}})
				if (err == nil) != ok {
					t.Errorf("usage %v: verify error %v, want success %v", usage, err, ok)
				}
				if _, err := cert.Verify(x509.VerifyOptions{Roots: other.Pool(), KeyUsages: []x509.ExtKeyUsage{usage}}); err == nil {
					t.Errorf("usage %v: verifies against another authority", usage)
				}
			}
			for _, name := range tt.names {
				if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: name}); err != nil {
					t.Errorf("as %s: %v", name, err)
				}
			}
			if tt.not != "" {
				if _, err := cert.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: tt.not}); err == nil {
					t.Errorf("verifies as %s, a name it was not issued for", tt.not)
				}
			}
		})
	}
	if _, err := ca.Issue(testpki.Leaf{CommonName: "nothing"}); err == nil {
		t.Error("a certificate for neither server nor client was issued")
	}
}

func TestWriteFiles(t *testing.T) {
	kp, err := newAuthority(t, "ca").Issue(testpki.Leaf{CommonName: "s", IPs: testpki.Loopback, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile, err := kp.WriteFiles(t.TempDir(), "tls.crt", "tls.key")
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]byte{certFile: kp.CertPEM, keyFile: kp.KeyPEM} {
		got, err := os.ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Errorf("%s: %d bytes, err %v; want the pair's %d", path, len(got), err, len(want))
		}
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", path, fi.Mode().Perm())
		}
	}
}
