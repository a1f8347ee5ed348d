package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// testAdapter is custom-metrics-apiserver's own test adapter (its fake
// provider, from the module gpuscale requires, run by ./testadapter so
// that its write endpoint takes a free port): a second, real metrics API
// server on loopback, with
// delegated authentication (it trusts the cluster's front-proxy CA from the
// extension-apiserver-authentication ConfigMap) and delegated
// authorization (SubjectAccessReviews to the local kube-apiserver), and an
// audit log that records who each request was served for.
type testAdapter struct {
	url       string // https://127.0.0.1:PORT
	writeURL  string // http://127.0.0.1:PORT, where fake values are set
	caFile    string // verifies its serving certificate
	auditPath string
}

func startTestAdapter(t *testing.T) *testAdapter {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "test-adapter")
	build := exec.Command("go", "build", "-o", bin, "./testadapter")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the test adapter: %v\n%s", err, out)
	}
	kubeconfig, err := env.Cluster.Kubeconfig("federation-test-adapter", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	certPEM, keyPEM, caPEM, err := env.Cluster.ServingCerts("test-adapter.federation.svc")
	if err != nil {
		t.Fatal(err)
	}
	ta := &testAdapter{caFile: writeTestFile(t, dir, "ca.crt", caPEM), auditPath: filepath.Join(dir, "audit.log")}
	policy := writeTestFile(t, dir, "audit-policy.yaml", []byte("apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n"))
	ports, err := testenv.FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	port, writePort := ports[0], ports[1]
	ta.url = "https://127.0.0.1:" + strconv.Itoa(port)
	ta.writeURL = "http://127.0.0.1:" + strconv.Itoa(writePort)
	args := []string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1", "--write-address=127.0.0.1:" + strconv.Itoa(writePort),
		"--tls-cert-file=" + writeTestFile(t, dir, "tls.crt", certPEM), "--tls-private-key-file=" + writeTestFile(t, dir, "tls.key", keyPEM),
		"--lister-kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--audit-log-path=" + ta.auditPath, "--audit-policy-file=" + policy, "--v=2"}
	logPath := filepath.Join(env.Cluster.Dir(), "logs", "test-adapter.log")
	p, err := childproc.Start("test-adapter", bin, args, nil, logPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	ready := testenv.HTTPOK(ta.httpClient(t), ta.url+"/readyz")
	testenv.WaitFor(t, 60*time.Second, "the test adapter to be ready (log "+logPath+")", func(ctx context.Context) (bool, error) {
		return ready(ctx), nil
	})
	return ta
}

func (ta *testAdapter) httpClient(t *testing.T) *http.Client {
	t.Helper()
	ca, err := os.ReadFile(ta.caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
}

// setObjectMetric sets a namespaced object's metric through the test
// adapter's write endpoint.
func (ta *testAdapter) setObjectMetric(t *testing.T, ns, resource, name, metric, value string) {
	t.Helper()
	u := fmt.Sprintf("%s/write-metrics/namespaces/%s/%s/%s/%s", ta.writeURL, ns, resource, name, metric)
	req, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(strconv.Quote(value)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("write %s: %s", u, resp.Status)
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Stage      string `json:"stage"`
	RequestURI string `json:"requestURI"`
	User       struct {
		Username string              `json:"username"`
		Groups   []string            `json:"groups"`
		Extra    map[string][]string `json:"extra"`
	} `json:"user"`
	ResponseStatus struct {
		Code int `json:"code"`
	} `json:"responseStatus"`
}

// auditEvents reads the test adapter's completed requests.
func (ta *testAdapter) auditEvents(t *testing.T) []auditEvent {
	t.Helper()
	f, err := os.Open(ta.auditPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []auditEvent
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit log line %q: %v", sc.Text(), err)
		}
		if e.Stage == "ResponseComplete" {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func writeTestFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
