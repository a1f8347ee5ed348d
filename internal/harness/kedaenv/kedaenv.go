// Package kedaenv runs a real KEDA (v2.21.0's operator and metrics API
// server, built from the Go module by hack/keda-build.sh) as local
// processes against a localcluster control plane: KEDA's CRDs from the
// module's config/crd, its namespace, and the external metrics APIService
// pointed at KEDA's metrics API server through an ExternalName Service, as
// devenv does for gpuscale's adapter. Leader election, webhooks and
// certificate rotation are off; the credentials come from NewPKI.
package kedaenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// Names KEDA's own manifests use.
const (
	Namespace         = "keda"
	MetricsServerName = "keda-metrics-apiserver"
	externalAPI       = "v1beta1.external.metrics.k8s.io"
	kedaModule        = "github.com/kedacore/keda/v2"
	// BinDirEnv points at a folder holding keda-operator and
	// keda-adapter, bypassing the build script.
	BinDirEnv   = "GPUSCALE_KEDA_BIN"
	buildScript = "hack/keda-build.sh"
	toolsModule = "hack/tools/keda"
	readyWithin = 90 * time.Second
)

// Options configure Start.
type Options struct {
	Cluster *localcluster.Cluster
	// Dir holds the logs (Dir/logs) and the metrics server's serving pair.
	Dir string
	PKI *PKI
	// BinDir holds keda-operator and keda-adapter; empty: $GPUSCALE_KEDA_BIN
	// or what hack/keda-build.sh prints (building them when not cached).
	BinDir string
	// Env are extra NAME=value variables of both processes.
	Env    []string
	Logger *slog.Logger
	// BuildLog, if set, receives the build script's progress.
	BuildLog io.Writer
	// Stdout, if set, also receives both processes' logs.
	Stdout io.Writer
}

// KEDA is a running KEDA.
type KEDA struct {
	operator, metricsServer *childproc.Process
}

// Start installs KEDA's CRDs, starts its operator and metrics API server,
// and returns once the aggregator routes external.metrics.k8s.io to the
// latter. On error nothing it started is left running.
func Start(ctx context.Context, o Options) (k *KEDA, err error) {
	if o.Cluster == nil || o.PKI == nil || o.Dir == "" {
		return nil, errors.New("kedaenv: Cluster, PKI and Dir are required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	bin := o.BinDir
	if bin == "" {
		bin = os.Getenv(BinDirEnv)
	}
	if bin == "" {
		o.Logger.Info("running the KEDA build script (at once when cached)", "script", buildScript)
		if bin, err = localcluster.RunBuildScript(ctx, root, buildScript, o.BuildLog); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	if err := installCRDs(ctx, o.Cluster, root); err != nil {
		return nil, err
	}
	client := o.Cluster.Client()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("kedaenv: namespace: %w", err)
	}
	k = &KEDA{}
	defer func() {
		if err != nil {
			_ = k.Stop()
		}
	}()
	ports, err := testenv.FreePorts(4)
	if err != nil {
		return nil, err
	}
	grpcPort, probePort, securePort, metricsPort := ports[0], ports[1], ports[2], ports[3]
	env := append([]string{"KUBECONFIG=" + o.Cluster.AdminKubeconfig(), "WATCH_NAMESPACE=", "POD_NAMESPACE=" + Namespace,
		"KEDA_CLUSTER_OBJECT_NAMESPACE=" + Namespace}, o.Env...)
	if k.operator, err = childproc.Start("keda-operator", filepath.Join(bin, "keda-operator"), []string{
		"--leader-elect=false", "--enable-cert-rotation=false", "--cert-dir=" + o.PKI.Dir,
		"--metrics-bind-address=0", "--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probePort),
		"--metrics-service-bind-address=127.0.0.1:" + strconv.Itoa(grpcPort),
		"--zap-log-level=info",
	}, env, filepath.Join(o.Dir, "logs", "keda-operator.log"), o.Stdout); err != nil {
		return nil, fmt.Errorf("kedaenv: %w", err)
	}
	waitCtx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	if err := k.operator.WaitFor(waitCtx, "ready", 250*time.Millisecond, testenv.HTTPOK(&http.Client{Timeout: 2 * time.Second}, "http://127.0.0.1:"+strconv.Itoa(probePort)+"/readyz")); err != nil {
		return nil, fmt.Errorf("kedaenv: %w", err)
	}
	certFile, keyFile, err := servingPair(o.Cluster, o.Dir)
	if err != nil {
		return nil, err
	}
	kubeconfig := o.Cluster.AdminKubeconfig()
	if k.metricsServer, err = childproc.Start(MetricsServerName, filepath.Join(bin, "keda-adapter"), []string{
		"--secure-port=" + strconv.Itoa(securePort), "--bind-address=127.0.0.1",
		"--tls-cert-file=" + certFile, "--tls-private-key-file=" + keyFile, "--cert-dir=" + o.PKI.Dir,
		"--lister-kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--metrics-service-address=127.0.0.1:" + strconv.Itoa(grpcPort), "--port=" + strconv.Itoa(metricsPort),
	}, env, filepath.Join(o.Dir, "logs", "keda-metrics-apiserver.log"), o.Stdout); err != nil {
		return nil, fmt.Errorf("kedaenv: %w", err)
	}
	if err := takeExternalAPI(ctx, o.Cluster, securePort); err != nil {
		return nil, err
	}
	if err := k.metricsServer.WaitFor(waitCtx, "serving external.metrics.k8s.io through the aggregator", 250*time.Millisecond, externalAPIServed(o.Cluster)); err != nil {
		return nil, fmt.Errorf("kedaenv: %w", err)
	}
	return k, nil
}

// Stop stops both processes.
func (k *KEDA) Stop() error {
	var errs []error
	for _, p := range []*childproc.Process{k.metricsServer, k.operator} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	return errors.Join(errs...)
}

// OperatorLog is the operator's log file.
func (k *KEDA) OperatorLog() string { return k.operator.LogPath() }

// installCRDs applies the module's config/crd/bases (server-side: the
// ScaledObject CRD outgrows the last-applied annotation) and waits until
// they are established.
func installCRDs(ctx context.Context, c *localcluster.Cluster, root string) error {
	dir, err := moduleDir(ctx, root)
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "config", "crd", "bases")
	if out, err := c.Kubectl(ctx, "apply", "--server-side", "-f", crds); err != nil {
		return fmt.Errorf("kedaenv: apply KEDA's CRDs from %s: %w: %s", crds, err, out)
	}
	if err := c.WaitCRDsEstablished(ctx, time.Minute,
		"scaledobjects.keda.sh", "triggerauthentications.keda.sh", "clustertriggerauthentications.keda.sh", "scaledjobs.keda.sh"); err != nil {
		return fmt.Errorf("kedaenv: KEDA's CRDs: %w", err)
	}
	return nil
}

// moduleDir is the KEDA module's folder in the module cache, as the tools
// module pins it.
func moduleDir(ctx context.Context, root string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", kedaModule)
	cmd.Dir = filepath.Join(root, toolsModule)
	out, err := cmd.Output()
	dir := strings.TrimSpace(string(out))
	if err != nil || dir == "" {
		return "", fmt.Errorf("kedaenv: %s in %s: %v (run %s)", kedaModule, toolsModule, err, buildScript)
	}
	return dir, nil
}

// servingPair writes the metrics API server's serving certificate, signed
// by the cluster CA that the external APIService's caBundle already holds.
func servingPair(c *localcluster.Cluster, dir string) (certFile, keyFile string, err error) {
	certPEM, keyPEM, _, err := c.ServingCerts(MetricsServerName + "." + Namespace + ".svc")
	if err != nil {
		return "", "", fmt.Errorf("kedaenv: serving certificate: %w", err)
	}
	certFile, keyFile = filepath.Join(dir, "metrics-apiserver.crt"), filepath.Join(dir, "metrics-apiserver.key")
	if err := os.WriteFile(certFile, certPEM, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(keyFile, keyPEM, 0o600)
}

// takeExternalAPI points the external metrics APIService at KEDA's
// metrics API server, through an ExternalName Service to localhost (the
// aggregator refuses loopback Endpoints), keeping its caBundle.
func takeExternalAPI(ctx context.Context, c *localcluster.Cluster, port int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: MetricsServerName, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(port)}}},
	}
	if _, err := c.Client().CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("kedaenv: metrics server service: %w", err)
	}
	patch := fmt.Sprintf(`{"spec":{"service":{"namespace":%q,"name":%q,"port":%d}}}`, Namespace, MetricsServerName, port)
	if out, err := c.Kubectl(ctx, "patch", "apiservice", externalAPI, "--type=merge", "-p", patch); err != nil {
		return fmt.Errorf("kedaenv: point %s at KEDA: %w: %s", externalAPI, err, out)
	}
	return nil
}

// externalAPIServed: the APIService names KEDA's Service and is Available.
func externalAPIServed(c *localcluster.Cluster) func(context.Context) bool {
	return func(ctx context.Context) bool {
		out, err := c.Kubectl(ctx, "get", "apiservice", externalAPI, "-o",
			`jsonpath={.spec.service.name} {.status.conditions[?(@.type=="Available")].status}`)
		return err == nil && strings.TrimSpace(string(out)) == MetricsServerName+" True"
	}
}
