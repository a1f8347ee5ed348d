package certrotation

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // the subject key identifier of RFC 5280 4.2.1.2, not a signature
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// authority is one CA: its certificate and key, and their PEM.
type authority struct {
	cert    *x509.Certificate
	key     crypto.Signer
	certPEM []byte
	keyPEM  []byte
}

// leaf is a certificate (with the chain served after it) and its key.
type leaf struct {
	chain   []*x509.Certificate // chain[0] is the leaf
	certPEM []byte
	keyPEM  []byte
}

// skew backdates NotBefore so that a peer whose clock runs a little late
// accepts a certificate issued a moment ago.
func skew(validity time.Duration) time.Duration { return min(5*time.Minute, validity/10) }

func newKey() (*ecdsa.PrivateKey, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub crypto.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, err
	}
	sum := sha1.Sum(der) //nolint:gosec // see the import
	return sum[:], nil
}

// newAuthority makes a self-signed CA valid from now for validity. Each
// CA's name carries its issue time, so that two generations never share a
// subject and a client never mistakes one for the other.
func newAuthority(name string, now time.Time, validity time.Duration) (*authority, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	ski, err := keyID(key.Public())
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: fmt.Sprintf("%s@%d", name, now.Unix()), Organization: []string{"gpuscale"}},
		NotBefore:    now.Add(-skew(validity)), NotAfter: now.Add(validity),
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: false, MaxPathLen: 1,
		KeyUsage:     x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		SubjectKeyId: ski,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{cert: cert, key: key, certPEM: encodeCert(der), keyPEM: keyPEM}, nil
}

// crossSign makes a certificate for next's key and name signed by prev,
// valid until prev expires: served after a leaf that next signed, it lets
// a client that still trusts only prev verify that leaf.
func crossSign(prev, next *authority, now time.Time) (*x509.Certificate, []byte, error) {
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn, Subject: next.cert.Subject,
		NotBefore: now.Add(-skew(prev.cert.NotAfter.Sub(now))), NotAfter: prev.cert.NotAfter,
		IsCA: true, BasicConstraintsValid: true, MaxPathLenZero: true,
		KeyUsage:     next.cert.KeyUsage,
		SubjectKeyId: next.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, prev.cert, next.cert.PublicKey, prev.key)
	if err != nil {
		return nil, nil, fmt.Errorf("cross-signed CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return cert, encodeCert(der), nil
}

// leafSpec is what a leaf certificate says.
type leafSpec struct {
	commonName string
	dnsNames   []string
	usage      x509.ExtKeyUsage
}

// issue signs a leaf for spec valid until notAfter, followed in its chain
// by intermediates (a cross-signed CA, while one is valid).
func issue(ca *authority, spec leafSpec, now, notAfter time.Time, intermediates []*x509.Certificate) (*leaf, error) {
	key, keyPEM, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: spec.commonName, Organization: []string{"gpuscale"}},
		DNSNames:     spec.dnsNames,
		NotBefore:    now.Add(-skew(notAfter.Sub(now))), NotAfter: notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature,
		ExtKeyUsage:    []x509.ExtKeyUsage{spec.usage},
		AuthorityKeyId: ca.cert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &leaf{chain: []*x509.Certificate{cert}, certPEM: encodeCert(der), keyPEM: keyPEM}
	for _, c := range intermediates {
		l.chain = append(l.chain, c)
		l.certPEM = append(l.certPEM, encodeCert(c.Raw)...)
	}
	return l, nil
}

func encodeCert(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// parseCerts reads every CERTIFICATE block of b.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	return certutil.ParseCertsPEM(b)
}

// parsePair reads a certificate chain and the private key of its first
// certificate; nil and nil without error when both are empty.
func parsePair(certPEM, keyPEM []byte) ([]*x509.Certificate, crypto.Signer, error) {
	if len(certPEM) == 0 && len(keyPEM) == 0 {
		return nil, nil, nil
	}
	chain, err := parseCerts(certPEM)
	if err != nil {
		return nil, nil, err
	}
	k, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, nil, err
	}
	key, ok := k.(crypto.Signer)
	if !ok {
		return nil, nil, errors.New("key cannot sign")
	}
	if !publicKeyMatches(chain[0], key) {
		return nil, nil, errors.New("key does not match the certificate")
	}
	return chain, key, nil
}

// parseAuthority reads a CA pair; nil without error when both are empty.
func parseAuthority(certPEM, keyPEM []byte) (*authority, error) {
	certs, key, err := parsePair(certPEM, keyPEM)
	if certs == nil || err != nil {
		return nil, err
	}
	if !certs[0].IsCA {
		return nil, errors.New("not a CA")
	}
	return &authority{cert: certs[0], key: key, certPEM: certPEM, keyPEM: keyPEM}, nil
}

// parseLeaf reads a leaf pair; nil without error when both are empty.
func parseLeaf(certPEM, keyPEM []byte) (*leaf, error) {
	chain, _, err := parsePair(certPEM, keyPEM)
	if chain == nil || err != nil {
		return nil, err
	}
	return &leaf{chain: chain, certPEM: certPEM, keyPEM: keyPEM}, nil
}

func publicKeyMatches(c *x509.Certificate, key crypto.Signer) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	pub, ok := key.Public().(equaler)
	return ok && pub.Equal(c.PublicKey)
}

// signedBy: c's signature verifies with ca's key (same name and key).
func signedBy(c, ca *x509.Certificate) bool {
	return bytes.Equal(c.RawIssuer, ca.RawSubject) && c.CheckSignatureFrom(ca) == nil
}

func sameNames(c *x509.Certificate, names []string) bool {
	a, b := slices.Clone(c.DNSNames), slices.Clone(names)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
