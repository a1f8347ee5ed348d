package localcluster

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// pki holds every credential the control plane needs, and the paths of the
// files the components read.
type pki struct {
	dir        string
	ca         *testpki.Authority // signs serving and client certificates
	frontProxy *testpki.Authority // signs the aggregator's proxy client certificate
}

// Paths of the files written by newPKI, relative to pki.dir.
const (
	caCertFile         = "ca.crt"
	caKeyFile          = "ca.key"
	frontProxyCAFile   = "front-proxy-ca.crt"
	frontProxyCertFile = "front-proxy-client.crt"
	frontProxyKeyFile  = "front-proxy-client.key"
	apiserverCertFile  = "apiserver.crt"
	apiserverKeyFile   = "apiserver.key"
	saKeyFile          = "sa.key"
	saPubFile          = "sa.pub"
)

// newPKI creates the cluster and front-proxy authorities, the API server's
// serving certificate, the front-proxy client certificate and the
// service-account signing key, and writes them under dir.
func newPKI(dir string) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	ca, err := testpki.NewAuthority("gpuscale-localcluster-ca")
	if err != nil {
		return nil, err
	}
	fp, err := testpki.NewAuthority("gpuscale-localcluster-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, frontProxy: fp}
	serving, err := ca.Issue(testpki.Leaf{
		CommonName: "kube-apiserver",
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPs:    []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(firstServiceIP)},
		Server: true,
	})
	if err != nil {
		return nil, err
	}
	proxy, err := fp.Issue(testpki.Leaf{CommonName: "front-proxy-client", Client: true})
	if err != nil {
		return nil, err
	}
	saPriv, saPub, err := serviceAccountKey()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		caCertFile: ca.CertPEM, caKeyFile: ca.KeyPEM,
		frontProxyCAFile:   fp.CertPEM,
		frontProxyCertFile: proxy.CertPEM, frontProxyKeyFile: proxy.KeyPEM,
		apiserverCertFile: serving.CertPEM, apiserverKeyFile: serving.KeyPEM,
		saKeyFile: saPriv, saPubFile: saPub,
	}
	for name, data := range files {
		if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", name, err)
		}
	}
	return p, nil
}

// path returns the absolute path of a file written by newPKI.
func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

// serviceAccountKey generates the RSA key pair that signs and verifies
// service-account tokens (RS256 is what the API server issues).
func serviceAccountKey() (privPEM, pubPEM []byte, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, nil, fmt.Errorf("generate service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, fmt.Errorf("marshal service-account public key: %w", err)
	}
	privPEM = pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	pubPEM = pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub})
	return privPEM, pubPEM, nil
}
