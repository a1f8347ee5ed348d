package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// Kubeconfig writes a kubeconfig that authenticates to the API server with a
// client certificate for user (the certificate's CN) in groups (its O
// fields), and returns its path. The user has no permissions beyond those of
// system:authenticated until RBAC is bound to it.
//
// Certificate users are plain names: to run the metrics adapter, pick a name
// such as "gpuscale-adapter" and bind system:auth-delegator, the
// extension-apiserver-authentication-reader Role and the adapter's read
// access to it. The groups and scopes of a real ServiceAccount
// ("system:serviceaccount:<ns>:<name>") come from its tokens, not from a
// certificate, so they cannot be reproduced this way.
func (c *Cluster) Kubeconfig(user string, groups ...string) (string, error) {
	if user == "" {
		return "", fmt.Errorf("localcluster: kubeconfig: empty user name")
	}
	kp, err := c.pki.ca.Issue(testpki.Leaf{CommonName: user, Organization: groups, Client: true})
	if err != nil {
		return "", err
	}
	// The sequence number keeps "a:b" and "a_b", or one user with two sets
	// of groups, from sharing a file.
	n := c.userSeq.Add(1)
	path := filepath.Join(c.dir, "kubeconfigs", fmt.Sprintf("user-%d-%s.kubeconfig", n, fileSafe(user)))
	if err := writeKubeconfig(path, c.serverURL, c.pki.ca.CertPEM, kp, user); err != nil {
		return "", err
	}
	return path, nil
}

// ServingCerts returns a serving certificate signed by the cluster CA for
// dnsNames plus localhost and 127.0.0.1, its key, and the CA certificate:
// what an aggregated API server needs for --tls-cert-file and what its
// APIService needs as caBundle.
func (c *Cluster) ServingCerts(dnsNames ...string) (certPEM, keyPEM, caPEM []byte, err error) {
	names := append(append([]string{}, dnsNames...), "localhost")
	kp, err := c.pki.ca.Issue(testpki.Leaf{CommonName: names[0], DNSNames: names, IPs: testpki.Loopback, Server: true})
	if err != nil {
		return nil, nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, c.pki.ca.CertPEM, nil
}

// ClientCAFile returns the path of the CA that signs the cluster's client
// certificates (the API server's --client-ca-file).
func (c *Cluster) ClientCAFile() string { return c.pki.path(caCertFile) }

// RequestHeaderCAFile returns the path of the front-proxy CA that signs the
// client certificate the API server presents to aggregated API servers (its
// --requestheader-client-ca-file). Aggregated servers find it in the
// kube-system/extension-apiserver-authentication ConfigMap as well.
func (c *Cluster) RequestHeaderCAFile() string { return c.pki.path(frontProxyCAFile) }

// AdminKubeconfig returns the path of a cluster-admin kubeconfig (a client
// certificate in the system:masters group).
func (c *Cluster) AdminKubeconfig() string { return c.adminKubeconfig }

// RESTConfig returns a cluster-admin client configuration. Each call returns
// a fresh copy that the caller may modify.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.restConfig) }

// componentKubeconfig issues a client certificate for a control-plane
// component and writes its kubeconfig under Dir/kubeconfigs.
func (c *Cluster) componentKubeconfig(name, user string, groups ...string) (string, error) {
	kp, err := c.pki.ca.Issue(testpki.Leaf{CommonName: user, Organization: groups, Client: true})
	if err != nil {
		return "", err
	}
	path := filepath.Join(c.dir, "kubeconfigs", name+".kubeconfig")
	if err := writeKubeconfig(path, c.serverURL, c.pki.ca.CertPEM, kp, user); err != nil {
		return "", err
	}
	return path, nil
}

// writeKubeconfig writes a single-context kubeconfig with embedded
// credentials, so the file stays valid wherever it is copied.
func writeKubeconfig(path, server string, caPEM []byte, kp testpki.KeyPair, user string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{ClientCertificateData: kp.CertPEM, ClientKeyData: kp.KeyPEM}
	cfg.Contexts["local"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: user}
	cfg.CurrentContext = "local"
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create kubeconfig dir: %w", err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// restConfigFor builds a client configuration from a key pair.
func restConfigFor(server string, caPEM []byte, kp testpki.KeyPair) *rest.Config {
	return &rest.Config{
		Host: server,
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   caPEM,
			CertData: kp.CertPEM,
			KeyData:  kp.KeyPEM,
		},
		// Tests create objects in bursts; client-go's default 5 QPS would
		// throttle them more than the API server does.
		QPS:   100,
		Burst: 200,
	}
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// fileSafe maps a user name such as "system:foo" to a file name fragment.
func fileSafe(s string) string {
	return strings.Trim(unsafeFileChars.ReplaceAllString(s, "_"), "_")
}

// FrontProxyClientCert issues a client certificate from the front-proxy CA
// with the CN the API server's --requestheader-allowed-names accepts: what
// a component that proxies to aggregated API servers on behalf of users
// (gpuscale's federation) presents, as the aggregator itself does.
func (c *Cluster) FrontProxyClientCert() (certPEM, keyPEM []byte, err error) {
	kp, err := c.pki.frontProxy.Issue(testpki.Leaf{CommonName: "front-proxy-client", Client: true})
	if err != nil {
		return nil, nil, err
	}
	return kp.CertPEM, kp.KeyPEM, nil
}
