// Package devenv brings up gpuscale on a real local control plane: the
// kube-apiserver with its aggregation layer, the real HPA controller,
// kwok GPU nodes, the simulated world (exporters, kubelet pod-resources,
// inference servers on loopback pod IPs) and the adapter as a local process
// registered through the APIService and RBAC manifests in deploy/. The
// end-to-end suite and `make demo` share it.
package devenv

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/simworld"
)

// Namespace and names from deploy/manifests.
const (
	Namespace    = "gpuscale"
	AdapterName  = "gpuscale-adapter"
	ExporterName = "gpuscale-exporter"
	AdapterPort  = 6443 // the APIService's service port in deploy/manifests: unprivileged
	// AdapterPortEnv names the environment variable that moves the local
	// adapter off AdapterPort (the APIServices and their Service follow),
	// so that two environments can run on one machine; with
	// localcluster.PodCIDREnv set apart too, nothing else collides.
	AdapterPortEnv = "GPUSCALE_ADAPTER_PORT"
	manifestsDir   = "deploy/manifests"
	readyTimeout   = 90 * time.Second
	exporterLabel  = "app.kubernetes.io/name"
)

// manifests applied unchanged: the test proves them. 40-adapter.yaml (the
// in-cluster Deployment and ClusterIP Service) is replaced by a local
// process and an ExternalName Service of the same name.
var manifests = []string{"00-namespace.yaml", "10-adapter-rbac.yaml", "15-scaledown-rbac.yaml", "20-metrics-readers-rbac.yaml",
	"30-apiservice-custom-metrics.yaml", "31-apiservice-external-metrics.yaml"}

// apiServices are the APIServices the 30- and 31-apiservice files register.
var apiServices = []string{"v1beta2.custom.metrics.k8s.io", "v1beta1.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"}

// Options configure Up.
type Options struct {
	// Dir holds everything the environment writes (logs under Dir/logs).
	Dir string
	// Nodes and GPUsPerNode describe the kwok GPU nodes.
	Nodes, GPUsPerNode int
	// AdapterBinary is the built adapter; Up builds it into Dir if empty.
	AdapterBinary string
	// ExternalAdapter leaves the adapter to the caller (a container built
	// from the chart, say): Up registers it but starts none, and returns
	// without waiting for the metrics APIs (WaitAPIAvailable does).
	ExternalAdapter bool
	// AdapterArgs are extra adapter flags (scrape interval and the like).
	AdapterArgs []string
	// AdapterEnv are extra NAME=value environment variables of the
	// adapter (GOMEMLIMIT, say), on top of this process's.
	AdapterEnv []string
	// AdapterMemoryLimit, if not zero, runs the adapter in a memory cgroup
	// of its own limited to this many bytes, as the chart's
	// resources.limits.memory limits its container (root only).
	AdapterMemoryLimit int64
	// HPASyncPeriod is the HPA controller's sync period (default 5s).
	HPASyncPeriod time.Duration
	// ControllerManagerArgs are extra kube-controller-manager flags.
	ControllerManagerArgs []string
	// ConfigureWorld, if set, adjusts the simulated world's options (its
	// clock, say) before it starts.
	ConfigureWorld func(*simworld.Options)
	Logger         *slog.Logger
	// Stdout, if set, also receives the components' logs.
	Stdout io.Writer
}

// Env is a running environment.
type Env struct {
	Cluster *localcluster.Cluster
	World   *simworld.World

	opts        Options
	adapterPort int // AdapterPort, or AdapterPortEnv's value
	log         *slog.Logger
	root        string
	adapter     *childproc.Process
	adapterMem  *memoryCgroup
	worldStop   context.CancelFunc
	worldDone   chan error
}

// AdapterListenPort is the port the local adapter listens on:
// AdapterPortEnv's value, or AdapterPort.
func AdapterListenPort() (int, error) {
	v := os.Getenv(AdapterPortEnv)
	if v == "" {
		return AdapterPort, nil
	}
	port, err := strconv.Atoi(v)
	if err != nil || port < 1024 || port > 65535 {
		return 0, fmt.Errorf("devenv: %s=%q: want an unprivileged port, 1024-65535", AdapterPortEnv, v)
	}
	return port, nil
}

// AdapterServicePort is the port the adapter serves on and the APIServices'
// Service names: AdapterPort, or AdapterPortEnv's value.
func (e *Env) AdapterServicePort() int { return e.adapterPort }

// AdapterURL is the local adapter's own HTTPS address.
func (e *Env) AdapterURL() string { return "https://localhost:" + strconv.Itoa(e.adapterPort) }

// Up starts everything and returns once the custom metrics APIService is
// Available. On error nothing is left running.
func Up(ctx context.Context, o Options) (env *Env, err error) {
	if o.Dir == "" {
		return nil, errors.New("devenv: Dir is required")
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.GPUsPerNode == 0 {
		o.GPUsPerNode = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return nil, err
	}
	port, err := AdapterListenPort()
	if err != nil {
		return nil, err
	}
	e := &Env{opts: o, log: o.Logger, root: root, adapterPort: port}
	defer func() {
		if err != nil {
			_ = e.Down()
		}
	}()
	if e.opts.AdapterBinary == "" && !o.ExternalAdapter {
		if e.opts.AdapterBinary, err = buildAdapter(ctx, root, o.Dir); err != nil {
			return nil, err
		}
	}
	e.Cluster, err = localcluster.Start(ctx, localcluster.Options{Dir: filepath.Join(o.Dir, "cluster"),
		HPASyncPeriod: o.HPASyncPeriod, ControllerManagerArgs: o.ControllerManagerArgs, Logger: o.Logger, Stdout: o.Stdout})
	if err != nil {
		return nil, fmt.Errorf("devenv: control plane: %w", err)
	}
	for i := 1; i <= o.Nodes; i++ {
		if err := e.Cluster.AddGPUNode(ctx, fmt.Sprintf("gpu-node-%d", i), o.GPUsPerNode); err != nil {
			return nil, fmt.Errorf("devenv: node: %w", err)
		}
	}
	if err := e.applyManifests(ctx); err != nil {
		return nil, err
	}
	if err := e.startWorld(); err != nil {
		return nil, err
	}
	if err := e.createExporters(ctx); err != nil {
		return nil, err
	}
	if o.ExternalAdapter {
		return e, nil
	}
	if err := e.StartAdapter(ctx); err != nil {
		return nil, err
	}
	return e, nil
}

// Down stops the adapter, the world and the control plane.
func (e *Env) Down() error {
	errs := []error{e.StopAdapter()}
	if e.worldStop != nil {
		e.worldStop()
		<-e.worldDone
		e.worldStop = nil
	}
	if e.Cluster != nil {
		errs = append(errs, e.Cluster.Stop())
	}
	return errors.Join(errs...)
}

func (e *Env) applyManifests(ctx context.Context) error {
	args := []string{"apply"}
	for _, m := range manifests {
		args = append(args, "-f", filepath.Join(e.root, manifestsDir, m))
	}
	if out, err := e.Cluster.Kubectl(ctx, args...); err != nil {
		return fmt.Errorf("devenv: kubectl apply deploy/manifests: %w: %s", err, out)
	}
	if err := e.trustAdapterCA(ctx); err != nil {
		return err
	}
	// The aggregator reaches a local process through an ExternalName
	// Service: loopback Endpoints are refused by validation.
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: AdapterName, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(e.adapterPort)}}},
	}
	if _, err := e.Cluster.Client().CoreV1().Services(Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("devenv: adapter service: %w", err)
	}
	return nil
}

func (e *Env) startWorld() error {
	sockDir, err := os.MkdirTemp("", "gs")
	if err != nil {
		return err
	}
	wo := simworld.Options{Client: e.Cluster.Client(), Dir: sockDir, Logger: e.log.With("component", "simworld")}
	if e.opts.ConfigureWorld != nil {
		e.opts.ConfigureWorld(&wo)
	}
	e.World, err = simworld.New(wo)
	if err != nil {
		return fmt.Errorf("devenv: world: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.worldStop = cancel
	e.worldDone = make(chan error, 1)
	go func() {
		err := e.World.Run(ctx)
		_ = os.RemoveAll(sockDir)
		e.worldDone <- err
	}()
	return nil
}

// WaitAPIAvailable waits until the aggregator routes the custom and
// external metrics APIs to a ready adapter.
func (e *Env) WaitAPIAvailable(ctx context.Context, timeout time.Duration) error {
	rc := e.Cluster.Client().Discovery().RESTClient()
	var last error
	err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for _, path := range []string{"/apis/custom.metrics.k8s.io/v1beta2", "/apis/custom.metrics.k8s.io/v1beta1", "/apis/external.metrics.k8s.io/v1beta1"} {
			if _, last = rc.Get().AbsPath(path).DoRaw(ctx); last != nil {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("devenv: metrics APIs not available through the aggregator after %v: %w (last: %v)", timeout, err, last)
	}
	return nil
}

// trustAdapterCA does what the APIService files ask of whoever applies them:
// it puts the CA that signs the adapter's certificate (here the cluster
// CA, see StartAdapterWith) in each APIService's caBundle, so the
// aggregator verifies the adapter as it does in a cluster. It also points
// the APIServices at the port the local adapter listens on.
func (e *Env) trustAdapterCA(ctx context.Context) error {
	_, _, caPEM, err := e.Cluster.ServingCerts(AdapterName + "." + Namespace + ".svc")
	if err != nil {
		return fmt.Errorf("devenv: cluster CA: %w", err)
	}
	patch := fmt.Sprintf(`{"spec":{"caBundle":%q,"insecureSkipTLSVerify":false,"service":{"port":%d}}}`,
		base64.StdEncoding.EncodeToString(caPEM), e.adapterPort)
	for _, name := range apiServices {
		if out, err := e.Cluster.Kubectl(ctx, "patch", "apiservice", name, "--type=merge", "-p", patch); err != nil {
			return fmt.Errorf("devenv: caBundle of APIService %s: %w: %s", name, err, out)
		}
	}
	return nil
}
