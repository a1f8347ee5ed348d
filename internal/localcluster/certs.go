package localcluster

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certValidity is long enough for any test or demo and short enough that a
// leaked work directory is not a lasting credential.
const certValidity = 7 * 24 * time.Hour

// authority is a certificate authority that signs the cluster's certificates.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// keyPair is a signed leaf certificate and its private key, PEM-encoded.
type keyPair struct {
	certPEM []byte
	keyPEM  []byte
}

// leafSpec describes one leaf certificate.
type leafSpec struct {
	commonName   string
	organization []string
	dnsNames     []string
	ips          []net.IP
	client       bool // client authentication, else server authentication
}

// newAuthority creates a self-signed CA.
func newAuthority(commonName string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", commonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour), // tolerate small clock skew
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("self-sign %s: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// issue signs a new leaf certificate with a fresh ECDSA key.
func (a *authority) issue(spec leafSpec) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generate key for %s: %w", spec.commonName, err)
	}
	serial, err := randomSerial()
	if err != nil {
		return keyPair{}, err
	}
	usage := x509.ExtKeyUsageServerAuth
	if spec.client {
		usage = x509.ExtKeyUsageClientAuth
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: spec.organization},
		DNSNames:     spec.dnsNames,
		IPAddresses:  spec.ips,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("sign certificate for %s: %w", spec.commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return keyPair{}, err
	}
	return keyPair{certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// pki holds every credential the control plane needs, and the paths of the
// files the components read.
type pki struct {
	dir        string
	ca         *authority // signs serving and client certificates
	frontProxy *authority // signs the aggregator's proxy client certificate
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
	ca, err := newAuthority("gpuscale-localcluster-ca")
	if err != nil {
		return nil, err
	}
	fp, err := newAuthority("gpuscale-localcluster-front-proxy-ca")
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, frontProxy: fp}
	serving, err := ca.issue(leafSpec{
		commonName: "kube-apiserver",
		dnsNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		ips: []net.IP{net.IPv4(127, 0, 0, 1), net.ParseIP(firstServiceIP)},
	})
	if err != nil {
		return nil, err
	}
	proxy, err := fp.issue(leafSpec{commonName: "front-proxy-client", client: true})
	if err != nil {
		return nil, err
	}
	saPriv, saPub, err := serviceAccountKey()
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{
		caCertFile: ca.certPEM, caKeyFile: ca.keyPEM,
		frontProxyCAFile:   fp.certPEM,
		frontProxyCertFile: proxy.certPEM, frontProxyKeyFile: proxy.keyPEM,
		apiserverCertFile: serving.certPEM, apiserverKeyFile: serving.keyPEM,
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

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generate serial number: %w", err)
	}
	return serial, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
