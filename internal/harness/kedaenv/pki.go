package kedaenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// PKI is KEDA's own credentials, made before anything starts: a CA, and
// one certificate it signs for server and client use, for 127.0.0.1 and
// KEDA's Service names. KEDA's operator serves its metrics gRPC service
// with it and the metrics API server presents it as a client (both read
// --cert-dir: ca.crt, tls.crt, tls.key, as KEDA's cert rotation writes
// them); KEDA's operator presents it to gpuscale's scaler port, whose
// --keda-scaler-client-ca-file is CAFile.
type PKI struct {
	// Dir is KEDA's --cert-dir.
	Dir string
	// CAFile is Dir/ca.crt; CertPEM and KeyPEM the pair in Dir.
	CAFile          string
	CertPEM, KeyPEM []byte
}

// NewPKI writes the credentials into dir.
func NewPKI(dir string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := testpki.NewAuthority("keda-test-ca")
	if err != nil {
		return nil, fmt.Errorf("kedaenv: CA: %w", err)
	}
	kp, err := ca.Issue(testpki.Leaf{CommonName: "keda-operator", Organization: []string{"KEDAORG"},
		DNSNames: []string{"localhost", "keda-operator", "keda-operator." + Namespace + ".svc",
			"keda-metrics-apiserver." + Namespace + ".svc"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, Server: true, Client: true})
	if err != nil {
		return nil, fmt.Errorf("kedaenv: certificate: %w", err)
	}
	p := &PKI{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"), CertPEM: kp.CertPEM, KeyPEM: kp.KeyPEM}
	if err := os.WriteFile(p.CAFile, ca.CertPEM, 0o600); err != nil {
		return nil, err
	}
	if _, _, err := kp.WriteFiles(dir, "tls.crt", "tls.key"); err != nil {
		return nil, err
	}
	return p, nil
}
