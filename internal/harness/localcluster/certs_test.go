package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func parseCert(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("no PEM block")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return parseCert(t, data)
}

func pool(certs ...*x509.Certificate) *x509.CertPool {
	p := x509.NewCertPool()
	for _, c := range certs {
		p.AddCert(c)
	}
	return p
}

// TestPKI checks that every certificate the components load chains to the
// right authority with the right names and usages: a mistake here shows up
// only as an opaque TLS or 401 error from a component.
func TestPKI(t *testing.T) {
	k, err := newPKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ca := readCert(t, k.path(caCertFile))
	fpCA := readCert(t, k.path(frontProxyCAFile))
	if !ca.IsCA || !fpCA.IsCA {
		t.Fatal("authorities are not CAs")
	}
	if ca.Equal(fpCA) {
		t.Fatal("front-proxy CA must differ from the cluster CA")
	}

	serving := readCert(t, k.path(apiserverCertFile))
	for _, name := range []string{"localhost", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "127.0.0.1", firstServiceIP} {
		if _, err := serving.Verify(x509.VerifyOptions{DNSName: name, Roots: pool(ca)}); err != nil {
			t.Errorf("apiserver certificate for %q: %v", name, err)
		}
	}
	if _, err := tls.LoadX509KeyPair(k.path(apiserverCertFile), k.path(apiserverKeyFile)); err != nil {
		t.Errorf("apiserver key pair: %v", err)
	}

	proxy := readCert(t, k.path(frontProxyCertFile))
	if proxy.Subject.CommonName != "front-proxy-client" {
		t.Errorf("proxy client CN = %q", proxy.Subject.CommonName)
	}
	clientUse := x509.VerifyOptions{Roots: pool(fpCA), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if _, err := proxy.Verify(clientUse); err != nil {
		t.Errorf("proxy client certificate against the front-proxy CA: %v", err)
	}
	clientUse.Roots = pool(ca)
	if _, err := proxy.Verify(clientUse); err == nil {
		t.Error("proxy client certificate verifies against the cluster CA; the API server would accept it as a user")
	}

	data, err := os.ReadFile(k.path(saKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "RSA PRIVATE KEY" {
		t.Fatalf("service-account key is not an RSA PEM key")
	}
	if _, err := x509.ParsePKCS1PrivateKey(block.Bytes); err != nil {
		t.Errorf("service-account key: %v", err)
	}
}

func testCluster(t *testing.T) *Cluster {
	t.Helper()
	dir := t.TempDir()
	k, err := newPKI(dir + "/pki")
	if err != nil {
		t.Fatal(err)
	}
	return &Cluster{dir: dir, pki: k, serverURL: "https://127.0.0.1:6443"}
}

func TestKubeconfigUser(t *testing.T) {
	c := testCluster(t)
	tests := []struct {
		user   string
		groups []string
	}{
		{"gpuscale-adapter", nil},
		{"system:kube-scheduler", nil},
		{"alice", []string{"team-a", "system:masters"}},
		{"alice", []string{"team-b"}}, // same user, other groups: must not overwrite
	}
	paths := map[string]bool{}
	for _, tt := range tests {
		path, err := c.Kubeconfig(tt.user, tt.groups...)
		if err != nil {
			t.Fatalf("Kubeconfig(%q): %v", tt.user, err)
		}
		if paths[path] {
			t.Errorf("Kubeconfig(%q, %v) reused %s", tt.user, tt.groups, path)
		}
		paths[path] = true
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			t.Fatalf("load %s: %v", path, err)
		}
		if cfg.Host != c.serverURL {
			t.Errorf("host = %q, want %q", cfg.Host, c.serverURL)
		}
		cert := parseCert(t, cfg.CertData)
		if cert.Subject.CommonName != tt.user || !slices.Equal(cert.Subject.Organization, tt.groups) {
			t.Errorf("subject = %v, want CN=%s O=%v", cert.Subject, tt.user, tt.groups)
		}
		opts := x509.VerifyOptions{Roots: pool(c.pki.ca.Cert), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		if _, err := cert.Verify(opts); err != nil {
			t.Errorf("client certificate for %s: %v", tt.user, err)
		}
	}
	if _, err := c.Kubeconfig(""); err == nil {
		t.Error("Kubeconfig(\"\") succeeded")
	}
}

func TestServingCerts(t *testing.T) {
	c := testCluster(t)
	certPEM, keyPEM, caPEM, err := c.ServingCerts("custom-metrics-apiserver.gpuscale.svc")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		t.Fatalf("key pair: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("bad CA PEM")
	}
	cert := parseCert(t, certPEM)
	for _, name := range []string{"custom-metrics-apiserver.gpuscale.svc", "localhost", "127.0.0.1"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: name, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %q: %v", name, err)
		}
	}
	if _, err := cert.Verify(x509.VerifyOptions{DNSName: "other.svc", Roots: roots}); err == nil {
		t.Error("serving certificate verifies for a name it was not issued for")
	}
	if !slices.ContainsFunc(cert.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.IPv4(127, 0, 0, 1)) }) {
		t.Error("no 127.0.0.1 SAN")
	}
	if c.ClientCAFile() == c.RequestHeaderCAFile() || !strings.HasPrefix(c.ClientCAFile(), c.dir) {
		t.Errorf("CA files %q, %q", c.ClientCAFile(), c.RequestHeaderCAFile())
	}
}

func TestFileSafe(t *testing.T) {
	tests := map[string]string{
		"gpuscale-adapter":              "gpuscale-adapter",
		"system:kube-scheduler":         "system_kube-scheduler",
		"system:serviceaccount:ns:name": "system_serviceaccount_ns_name",
		"../../etc/passwd":              ".._.._etc_passwd",
		":leading-and-trailing:":        "leading-and-trailing",
		"user@example.com":              "user_example.com",
		"emoji-🙂-user":                  "emoji-_-user",
		"mixed:/:/:":                    "mixed",
	}
	for in, want := range tests {
		if got := fileSafe(in); got != want {
			t.Errorf("fileSafe(%q) = %q, want %q", in, got, want)
		}
		if strings.ContainsAny(fileSafe(in), "/:") {
			t.Errorf("fileSafe(%q) keeps a separator", in)
		}
	}
}
