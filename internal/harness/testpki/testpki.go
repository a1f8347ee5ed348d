// Package testpki issues throwaway certificates for servers and clients on
// this machine: the local control plane (internal/harness/localcluster), KEDA
// beside it (internal/harness/kedaenv) and the TLS servers of unit tests. Every key
// is a fresh ECDSA P-256 key and every certificate lasts a week: long
// enough for any test or demo, short enough that a leaked work directory
// is not a lasting credential. Never use it for a real cluster.
package testpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
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

// Validity is how long a certificate lasts from its issue.
const Validity = 7 * 24 * time.Hour

// Authority is a self-signed certificate authority.
type Authority struct {
	// Cert is the CA certificate; CertPEM and KeyPEM it and its key in PEM.
	Cert            *x509.Certificate
	CertPEM, KeyPEM []byte

	key crypto.Signer
}

// Leaf describes a certificate an Authority issues.
type Leaf struct {
	CommonName   string
	Organization []string // a client certificate's groups, to the kube-apiserver
	DNSNames     []string
	IPs          []net.IP
	// Server and Client are the extended key usages; at least one.
	Server, Client bool
}

// KeyPair is an issued certificate and its private key, in PEM.
type KeyPair struct {
	CertPEM, KeyPEM []byte
}

// Loopback is 127.0.0.1, the address test servers listen on.
var Loopback = []net.IP{net.IPv4(127, 0, 0, 1)}

// NewAuthority creates a CA named commonName.
func NewAuthority(commonName string) (*Authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("testpki: key of %s: %w", commonName, err)
	}
	tmpl, err := template(pkix.Name{CommonName: commonName})
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign
	tmpl.BasicConstraintsValid, tmpl.IsCA = true, true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("testpki: self-sign %s: %w", commonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("testpki: parse %s: %w", commonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, CertPEM: encodeCert(der), KeyPEM: keyPEM, key: key}, nil
}

// Issue signs a certificate for l with a fresh key.
func (a *Authority) Issue(l Leaf) (KeyPair, error) {
	if !l.Server && !l.Client {
		return KeyPair{}, fmt.Errorf("testpki: certificate for %q: neither server nor client", l.CommonName)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return KeyPair{}, fmt.Errorf("testpki: key for %s: %w", l.CommonName, err)
	}
	tmpl, err := template(pkix.Name{CommonName: l.CommonName, Organization: l.Organization})
	if err != nil {
		return KeyPair{}, err
	}
	tmpl.DNSNames, tmpl.IPAddresses = l.DNSNames, l.IPs
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.key)
	if err != nil {
		return KeyPair{}, fmt.Errorf("testpki: sign certificate for %s: %w", l.CommonName, err)
	}
	keyPEM, err := encodeKey(key)
	if err != nil {
		return KeyPair{}, err
	}
	return KeyPair{CertPEM: encodeCert(der), KeyPEM: keyPEM}, nil
}

// Pool is a certificate pool that trusts a alone.
func (a *Authority) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// TLS is the pair as a tls.Certificate.
func (k KeyPair) TLS() (tls.Certificate, error) {
	return tls.X509KeyPair(k.CertPEM, k.KeyPEM)
}

// WriteFiles writes the pair into dir as certName and keyName (0600) and
// returns their paths.
func (k KeyPair) WriteFiles(dir, certName, keyName string) (certFile, keyFile string, err error) {
	certFile, keyFile = filepath.Join(dir, certName), filepath.Join(dir, keyName)
	if err := os.WriteFile(certFile, k.CertPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("testpki: %w", err)
	}
	if err := os.WriteFile(keyFile, k.KeyPEM, 0o600); err != nil {
		return "", "", fmt.Errorf("testpki: %w", err)
	}
	return certFile, keyFile, nil
}

// template is a certificate's common part: a random serial and a validity
// from an hour ago, to tolerate small clock skew, to Validity from now.
func template(subject pkix.Name) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("testpki: serial number: %w", err)
	}
	now := time.Now()
	return &x509.Certificate{SerialNumber: serial, Subject: subject,
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(Validity)}, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func encodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("testpki: marshal private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}
