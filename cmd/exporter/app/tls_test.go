package app_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// serving writes a certificate for 127.0.0.1 and its key into dir and
// returns their paths and a pool trusting the CA that signed it.
func serving(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	ca, err := testpki.NewAuthority("gpuscale-exporter-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(testpki.Leaf{CommonName: "gpuscale-exporter-test", IPs: testpki.Loopback, Server: true})
	if err != nil {
		t.Fatal(err)
	}
	if certFile, keyFile, err = kp.WriteFiles(dir, "tls.crt", "tls.key"); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile, ca.Pool()
}

// TestRunTLSAndBasicAuth serves through an exporter-toolkit web config with
// TLS and a bcrypt-hashed password.
func TestRunTLSAndBasicAuth(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := serving(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webConfig := filepath.Join(dir, "web.yml")
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  prometheus: %s\n",
		certFile, keyFile, hash)
	if err := os.WriteFile(webConfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	o := simOptions("")
	o.WebConfigFile = webConfig
	p := start(t, o)

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := "https://" + p.addr + "/metrics"
	tests := []struct {
		name       string
		user, pass string
		want       int
	}{
		{"no credentials", "", "", http.StatusUnauthorized},
		{"wrong password", "prometheus", "guess", http.StatusUnauthorized},
		{"unknown user", "admin", "s3cret", http.StatusUnauthorized},
		{"right credentials", "prometheus", "s3cret", http.StatusOK},
	}
	for _, tc := range tests {
		req, err := http.NewRequest(http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.user != "" {
			req.SetBasicAuth(tc.user, tc.pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	// Plain HTTP must not get through to the handlers.
	if resp, err := http.Get("http://" + p.addr + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served /metrics on a TLS listener")
		}
	}
}
