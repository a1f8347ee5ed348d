package certrotation

import (
	"bytes"
	"crypto/x509"
	"fmt"
	"slices"
	"time"
)

// chain is one chain of trust kept in the Secret: the CA that signs, the
// CA that will sign next, every CA still trusted (the bundle peers verify
// with), and the leaf certificate the CA signed.
type chain struct {
	signer  *authority
	next    *authority
	trusted []*x509.Certificate // signer first, then next, then retired CAs until they expire
	leaf    *leaf
}

// layout names a chain's entries in the Secret's data.
type layout struct {
	bundle, signerCert, signerKey, nextCert, nextKey, leafCert, leafKey string
}

var (
	servingLayout = layout{"ca.crt", "ca-signer.crt", "ca-signer.key", "ca-next.crt", "ca-next.key", "tls.crt", "tls.key"}
	clientLayout  = layout{"client-ca.crt", "client-ca-signer.crt", "client-ca-signer.key", "client-ca-next.crt", "client-ca-next.key", "client-tls.crt", "client-tls.key"}
)

// readChain reads a chain from data. Whatever is missing or does not
// parse is left out, and plan makes it again.
func readChain(data map[string][]byte, l layout) *chain {
	c := &chain{}
	c.signer, _ = parseAuthority(data[l.signerCert], data[l.signerKey])
	c.next, _ = parseAuthority(data[l.nextCert], data[l.nextKey])
	c.trusted, _ = parseCerts(data[l.bundle])
	c.leaf, _ = parseLeaf(data[l.leafCert], data[l.leafKey])
	return c
}

// write puts the chain into data.
func (c *chain) write(data map[string][]byte, l layout) {
	data[l.signerCert], data[l.signerKey] = c.signer.certPEM, c.signer.keyPEM
	delete(data, l.nextCert)
	delete(data, l.nextKey)
	if c.next != nil {
		data[l.nextCert], data[l.nextKey] = c.next.certPEM, c.next.keyPEM
	}
	data[l.bundle] = c.bundlePEM()
	data[l.leafCert], data[l.leafKey] = c.leaf.certPEM, c.leaf.keyPEM
}

func (c *chain) bundlePEM() []byte {
	var b []byte
	for _, ca := range c.trusted {
		b = append(b, encodeCert(ca.Raw)...)
	}
	return b
}

// policy is how one chain is kept: its CA's and leaf's validity, and what
// the leaf says.
type policy struct {
	caName       string
	caValidity   time.Duration
	leafValidity time.Duration
	leaf         leafSpec
}

// renewAt is two thirds into a certificate's life, as cert-manager
// renews by default: a third of its life is left to replace it.
func renewAt(c *x509.Certificate) time.Time {
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// promoteAt is when the next CA starts signing: halfway from its issue to
// the signer's expiry. Until then it has only been published in the
// bundle, so every peer that reloads its trust has it before the first
// leaf it signed is served; the leaf issued at promotion also carries the
// new CA cross-signed by the old one, for peers that never reload.
func promoteAt(signer, next *x509.Certificate) time.Time {
	return next.NotBefore.Add(signer.NotAfter.Sub(next.NotBefore) / 2)
}

// plan brings c up to date at now: a CA or leaf that is missing, broken,
// expired or due is replaced. It reports whether c changed and when it
// next needs to be looked at.
func (p policy) plan(c *chain, now time.Time) (changed bool, next time.Time, err error) {
	issued := false
	if c.signer == nil || !now.Before(c.signer.cert.NotAfter) {
		if c.signer, err = newAuthority(p.caName, now, p.caValidity); err != nil {
			return false, time.Time{}, err
		}
		c.next, c.trusted, c.leaf, changed = nil, nil, nil, true
	}
	if c.next != nil && (!now.Before(c.next.cert.NotAfter) || c.next.cert.NotAfter.Before(c.signer.cert.NotAfter)) {
		c.next, changed = nil, true // broken: made again below
	}
	if c.next == nil && !now.Before(renewAt(c.signer.cert)) {
		if c.next, err = newAuthority(p.caName, now, p.caValidity); err != nil {
			return false, time.Time{}, err
		}
		changed = true
	}
	if c.next != nil && !now.Before(promoteAt(c.signer.cert, c.next.cert)) {
		cross, _, err := crossSign(c.signer, c.next, now)
		if err != nil {
			return false, time.Time{}, err
		}
		c.signer, c.next = c.next, nil
		notAfter := minTime(now.Add(p.leafValidity), cross.NotAfter)
		if c.leaf, err = issue(c.signer, p.leaf, now, notAfter, []*x509.Certificate{cross}); err != nil {
			return false, time.Time{}, err
		}
		changed, issued = true, true
	}
	if trusted := p.trust(c, now); !sameCerts(trusted, c.trusted) {
		c.trusted, changed = trusted, true
	}
	if !issued && p.leafDue(c, now) {
		notAfter := minTime(now.Add(p.leafValidity), c.signer.cert.NotAfter)
		if c.leaf, err = issue(c.signer, p.leaf, now, notAfter, nil); err != nil {
			return false, time.Time{}, err
		}
		changed = true
	}
	next = renewAt(c.leaf.chain[0])
	if c.next == nil {
		next = minTime(next, renewAt(c.signer.cert))
	} else {
		next = minTime(next, promoteAt(c.signer.cert, c.next.cert))
	}
	for _, ca := range c.trusted {
		next = minTime(next, ca.NotAfter)
	}
	for _, ic := range c.leaf.chain[1:] {
		next = minTime(next, ic.NotAfter)
	}
	return changed, next, nil
}

// trust is the bundle: the signer, the next CA, and every CA trusted
// before that has not expired (a leaf it signed may still be served).
func (p policy) trust(c *chain, now time.Time) []*x509.Certificate {
	out := []*x509.Certificate{c.signer.cert}
	if c.next != nil {
		out = append(out, c.next.cert)
	}
	for _, ca := range c.trusted {
		if now.Before(ca.NotAfter) && ca.IsCA && !slices.ContainsFunc(out, func(o *x509.Certificate) bool { return bytes.Equal(o.Raw, ca.Raw) }) {
			out = append(out, ca)
		}
	}
	return out
}

// leafDue: the leaf is missing, not the signer's, for other names, due
// for renewal, or carries an intermediate that has expired.
func (p policy) leafDue(c *chain, now time.Time) bool {
	if c.leaf == nil {
		return true
	}
	l := c.leaf.chain[0]
	if !signedBy(l, c.signer.cert) || !now.Before(renewAt(l)) || l.Subject.CommonName != p.leaf.commonName || !sameNames(l, p.leaf.dnsNames) {
		return true
	}
	if !slices.Contains(l.ExtKeyUsage, p.leaf.usage) {
		return true
	}
	for _, ic := range c.leaf.chain[1:] {
		if !now.Before(ic.NotAfter) {
			return true
		}
	}
	return false
}

func sameCerts(a, b []*x509.Certificate) bool {
	return slices.EqualFunc(a, b, func(x, y *x509.Certificate) bool { return bytes.Equal(x.Raw, y.Raw) })
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// validate checks a policy's durations.
func (p policy) validate() error {
	if p.leafValidity < 3*time.Second || p.caValidity < 3*p.leafValidity {
		return fmt.Errorf("certificate validity %v and CA validity %v: want at least 3s, and a CA valid three times as long", p.leafValidity, p.caValidity)
	}
	return nil
}
