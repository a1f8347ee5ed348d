package devenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
)

// StartAdapter starts the adapter and waits for the metrics APIs to be
// available through the aggregator.
func (e *Env) StartAdapter(ctx context.Context) error {
	return e.StartAdapterWith(ctx, e.opts.AdapterArgs)
}

// StartAdapterWith is StartAdapter with args in place of
// Options.AdapterArgs: another --source, say.
func (e *Env) StartAdapterWith(ctx context.Context, extraArgs []string) error {
	if e.adapter != nil {
		return errors.New("devenv: adapter already running")
	}
	dir := filepath.Join(e.opts.Dir, "adapter")
	if err := os.MkdirAll(filepath.Join(e.opts.Dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	kubeconfig, err := e.serviceAccountKubeconfig(ctx, dir)
	if err != nil {
		return err
	}
	// An adapter that keeps its own certificate (--certs-secret) gets no
	// files; otherwise one the APIServices' caBundle (the cluster CA)
	// verifies.
	var tlsArgs []string
	if !slices.ContainsFunc(extraArgs, func(a string) bool { return strings.HasPrefix(a, "--certs-secret=") }) {
		certPEM, keyPEM, err := e.AdapterServingCert()
		if err != nil {
			return err
		}
		certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
		if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
			return err
		}
		if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
			return err
		}
		tlsArgs = []string{"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile}
	}
	logPath := filepath.Join(e.opts.Dir, "logs", "adapter.log")
	args := append([]string{
		"--secure-port=" + strconv.Itoa(e.adapterPort), "--bind-address=127.0.0.1",
		"--lister-kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--exporter-selector=" + exporterLabel + "=" + ExporterName,
		"--exporter-namespace=" + Namespace, "--exporter-daemonset=" + ExporterName,
	}, append(tlsArgs, extraArgs...)...)
	bin := e.opts.AdapterBinary
	if e.opts.AdapterMemoryLimit > 0 {
		cg, err := newMemoryCgroup(fmt.Sprintf("gpuscale-adapter-%d-%d", os.Getpid(), e.adapterPort), e.opts.AdapterMemoryLimit)
		if err != nil {
			return err
		}
		e.adapterMem = cg
		// The shell joins the cgroup and becomes the adapter, so that the
		// adapter reads its limit from its first instruction on.
		args = append([]string{"-c", `echo $$ > "$0" && exec "$@"`, cg.procsFile(), bin}, args...)
		bin = "/bin/sh"
	}
	p, err := childproc.Start("adapter", bin, args, e.opts.AdapterEnv, logPath, nil)
	if err != nil {
		return fmt.Errorf("devenv: adapter: %w", err)
	}
	e.adapter = p
	if err := e.WaitAPIAvailable(ctx, readyTimeout); err != nil {
		return fmt.Errorf("%w; see %s", err, logPath)
	}
	return nil
}

// AdapterPID is the running adapter's process ID (0 if none), for
// measuring its CPU time and memory.
func (e *Env) AdapterPID() int {
	if e.adapter == nil {
		return 0
	}
	return e.adapter.Pid()
}

// AdapterMemory is the most memory the adapter's cgroup has held and how
// many times the kernel killed the adapter for passing its limit, with
// Options.AdapterMemoryLimit set.
func (e *Env) AdapterMemory() (peakBytes, oomKills int64, err error) {
	if e.adapterMem == nil {
		return 0, 0, errors.New("devenv: the adapter has no memory limit of its own (Options.AdapterMemoryLimit)")
	}
	peak, err1 := e.adapterMem.Peak()
	kills, err2 := e.adapterMem.OOMKills()
	return peak, kills, errors.Join(err1, err2)
}

// StopAdapter stops the adapter (SIGTERM, then SIGKILL after 5s).
func (e *Env) StopAdapter() error {
	var err error
	if e.adapter != nil {
		err = e.adapter.Stop()
		e.adapter = nil
	}
	if e.adapterMem != nil {
		err = errors.Join(err, e.adapterMem.remove())
		e.adapterMem = nil
	}
	return err
}

// AdapterServingCert is a serving certificate and key for the adapter,
// signed by the CA the APIServices trust (their caBundle), for the names
// the aggregator and local clients use.
func (e *Env) AdapterServingCert() (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, _, err = e.Cluster.ServingCerts(AdapterName+"."+Namespace+".svc", "localhost")
	return certPEM, keyPEM, err
}

// AdapterToken is a day-long token of the gpuscale-adapter ServiceAccount:
// what the kubelet would mount into the adapter's pod.
func (e *Env) AdapterToken(ctx context.Context) (string, error) {
	ttl := int64(24 * 3600)
	tok, err := e.Cluster.Client().CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, AdapterName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("devenv: token for %s/%s: %w", Namespace, AdapterName, err)
	}
	return tok.Status.Token, nil
}

// serviceAccountKubeconfig writes a kubeconfig holding a token of the
// gpuscale-adapter ServiceAccount, so the local adapter has exactly the
// permissions deploy/manifests give the in-cluster one.
func (e *Env) serviceAccountKubeconfig(ctx context.Context, dir string) (string, error) {
	token, err := e.AdapterToken(ctx)
	if err != nil {
		return "", err
	}
	rc := e.Cluster.RESTConfig()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData}
	cfg.AuthInfos["adapter"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["adapter"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "adapter"}
	cfg.CurrentContext = "adapter"
	path := filepath.Join(dir, "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

func buildAdapter(ctx context.Context, root, dir string) (string, error) {
	out := filepath.Join(dir, "bin", "adapter")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/adapter")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("devenv: build adapter: %w: %s", err, b)
	}
	return out, nil
}

// AdapterGet fetches a path of the local adapter's own server (its
// /metrics, say) as the cluster's admin: the adapter delegates the check
// to the kube-apiserver.
func (e *Env) AdapterGet(ctx context.Context, path string) ([]byte, error) {
	cfg := e.Cluster.RESTConfig()
	cfg.Host = e.AdapterURL()
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("devenv: adapter client: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.Host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("devenv: adapter %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("devenv: adapter %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("devenv: adapter %s: %s", path, resp.Status)
	}
	return body, nil
}

// AdapterCounter is the sum of the adapter's counter name over its series
// whose labels include labels: how many requests of a kind the adapter
// has answered, for a test that must know its callers have come back
// (say, the HPA controller's syncs) before it judges what they did.
func (e *Env) AdapterCounter(ctx context.Context, name string, labels map[string]string) (float64, error) {
	body, err := e.AdapterGet(ctx, "/metrics")
	if err != nil {
		return 0, err
	}
	return counterSum(body, name, labels)
}

// counterSum is AdapterCounter on an exposition.
func counterSum(body []byte, name string, labels map[string]string) (float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("devenv: adapter /metrics: %w", err)
	}
	var sum float64
	for _, m := range fams[name].GetMetric() {
		if hasLabels(m, labels) {
			sum += m.GetCounter().GetValue()
		}
	}
	return sum, nil
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}
