package certrotation

import (
	"crypto/x509"
	"testing"
	"time"
)

// verifies: the leaf's chain verifies against bundle at now for the
// leaf's purpose (and, for serving, the name).
func verifies(l *leaf, bundle []*x509.Certificate, now time.Time, p policy) error {
	roots := x509.NewCertPool()
	for _, c := range bundle {
		roots.AddCert(c)
	}
	inter := x509.NewCertPool()
	for _, c := range l.chain[1:] {
		inter.AddCert(c)
	}
	opts := x509.VerifyOptions{Roots: roots, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{p.leaf.usage}}
	if len(p.leaf.dnsNames) > 0 {
		opts.DNSName = p.leaf.dnsNames[len(p.leaf.dnsNames)-1]
	}
	_, err := l.chain[0].Verify(opts)
	return err
}

// TestPlanKeepsPeersVerifying walks a chain through four CA lifetimes in
// small steps and checks, at every step, that the leaf in force is valid
// and verifies against every bundle published in the last sixth of a CA's
// life (a peer that reloads its trust that often never fails), that CAs
// and leaves were in fact replaced, and that renewals do not pile up.
func TestPlanKeepsPeersVerifying(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    policy
	}{
		{"serving", policy{caName: "ca", caValidity: 90 * time.Minute, leafValidity: 20 * time.Minute,
			leaf: leafSpec{commonName: "svc.ns.svc", dnsNames: []string{"svc", "svc.ns.svc"}, usage: x509.ExtKeyUsageServerAuth}}},
		{"client, leaf as long as a third of the CA", policy{caName: "client-ca", caValidity: 90 * time.Minute, leafValidity: 30 * time.Minute,
			leaf: leafSpec{commonName: "keda-operator", usage: x509.ExtKeyUsageClientAuth}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.p
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			step := p.caValidity / 90
			lag := p.caValidity / 6
			type published struct {
				at     time.Time
				bundle []*x509.Certificate
			}
			var history []published
			c := &chain{}
			signers, leaves := map[string]bool{}, map[string]bool{}
			var writes int
			for now := start; now.Before(start.Add(4 * p.caValidity)); now = now.Add(step) {
				changed, next, err := p.plan(c, now)
				if err != nil {
					t.Fatal(err)
				}
				if !next.After(now) {
					t.Fatalf("at %v: next look %v is not in the future", now.Sub(start), next.Sub(start))
				}
				if changed {
					writes++
					history = append(history, published{now, c.trusted})
				}
				signers[string(c.signer.cert.Raw)] = true
				leaves[string(c.leaf.chain[0].Raw)] = true
				l := c.leaf.chain[0]
				if now.Before(l.NotBefore) || !now.Before(l.NotAfter) {
					t.Fatalf("at %v: leaf valid %v to %v", now.Sub(start), l.NotBefore.Sub(start), l.NotAfter.Sub(start))
				}
				// The bundles a peer may hold: the one in force lag ago, and
				// every one published since.
				for i, h := range history {
					if i+1 < len(history) && !history[i+1].at.After(now.Add(-lag)) {
						continue
					}
					if err := verifies(c.leaf, h.bundle, now, p); err != nil {
						t.Fatalf("at %v: the leaf does not verify against the bundle published at %v: %v", now.Sub(start), h.at.Sub(start), err)
					}
				}
			}
			if len(signers) < 4 {
				t.Errorf("%d signing CAs over four CA lifetimes, want at least 4", len(signers))
			}
			// Renewal two thirds in: a leaf every 2/3 of its validity, plus
			// one per CA promotion; twice that is a pile-up.
			if bound := int(4*p.caValidity/(p.leafValidity*2/3)) + 4; len(leaves) > 2*bound || len(leaves) < bound/2 {
				t.Errorf("%d leaves issued over four CA lifetimes, want about %d", len(leaves), bound)
			}
			if writes > 3*len(leaves) {
				t.Errorf("%d writes for %d leaves", writes, len(leaves))
			}
		})
	}
}

// TestPlanRepairs: whatever in the Secret is missing, broken or for other
// names is made again; a chain in order is left alone.
func TestPlanRepairs(t *testing.T) {
	p := policy{caName: "ca", caValidity: 3 * time.Hour, leafValidity: time.Hour,
		leaf: leafSpec{commonName: "a", dnsNames: []string{"a", "a.ns.svc"}, usage: x509.ExtKeyUsageServerAuth}}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	good := map[string][]byte{}
	c := &chain{}
	if _, _, err := p.plan(c, now); err != nil {
		t.Fatal(err)
	}
	c.write(good, servingLayout)
	for _, tc := range []struct {
		name       string
		mutate     func(d map[string][]byte)
		p          policy
		wantChange bool
		newCA      bool
	}{
		{"in order", func(map[string][]byte) {}, p, false, false},
		{"empty", func(d map[string][]byte) { clear(d) }, p, true, true},
		{"garbage key", func(d map[string][]byte) { d["ca-signer.key"] = []byte("x") }, p, true, true},
		{"leaf of another key", func(d map[string][]byte) { d["tls.key"] = good["ca-signer.key"] }, p, true, false},
		{"bundle lost", func(d map[string][]byte) { delete(d, "ca.crt") }, p, true, false},
		{"other names", func(map[string][]byte) {}, policy{caName: "ca", caValidity: 3 * time.Hour, leafValidity: time.Hour,
			leaf: leafSpec{commonName: "b", dnsNames: []string{"b"}, usage: x509.ExtKeyUsageServerAuth}}, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := map[string][]byte{}
			for k, v := range good {
				d[k] = v
			}
			tc.mutate(d)
			c := readChain(d, servingLayout)
			changed, _, err := tc.p.plan(c, now.Add(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			if changed != tc.wantChange {
				t.Fatalf("changed = %v, want %v", changed, tc.wantChange)
			}
			if got := string(c.signer.certPEM) != string(good["ca-signer.crt"]); got != tc.newCA {
				t.Errorf("new CA = %v, want %v", got, tc.newCA)
			}
			if err := verifies(c.leaf, c.trusted, now.Add(time.Minute), tc.p); err != nil {
				t.Errorf("the repaired leaf does not verify: %v", err)
			}
		})
	}
}
