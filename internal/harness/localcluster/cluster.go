// Package localcluster runs a real Kubernetes control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) and kwok's fake
// kubelets as local processes on 127.0.0.1, for gpuscale's end-to-end tests
// and `make demo`. Pods on kwok nodes get IPs in 127.1.0.0/16, so a test can
// serve a fake exporter or inference server on a pod's own IP.
//
// The binaries come from hack/control-plane-build.sh, which builds the
// pinned versions once and caches them.
package localcluster

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
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/testpki"
)

// Options configures Start.
type Options struct {
	// Dir holds certificates, etcd data, kubeconfigs and component logs
	// (Dir/logs/<component>.log). Required; tests pass t.TempDir().
	Dir string
	// BinDir holds the binaries. If empty, $GPUSCALE_K8S_BIN; if that is
	// empty too, the folder hack/control-plane-build.sh prints, found by
	// walking up from the working directory to the repository root.
	BinDir string
	// HPASyncPeriod is the controller manager's
	// --horizontal-pod-autoscaler-sync-period. Default 5s.
	HPASyncPeriod time.Duration
	// HPADownscaleStabilization is the controller manager's
	// --horizontal-pod-autoscaler-downscale-stabilization. Default 0, so
	// only an HPA's own behavior section delays scale-down.
	HPADownscaleStabilization time.Duration
	// ControllerManagerArgs are extra kube-controller-manager flags (its
	// client's --kube-api-qps, say), after the harness's own.
	ControllerManagerArgs []string
	// Logger receives the harness's progress. Default: discard.
	Logger *slog.Logger
	// Stdout, if set, receives every component's output as well as its log
	// file, each line prefixed with "[component] ", and the build script's
	// progress.
	Stdout io.Writer
}

// Startup deadlines. The API server usually needs 3-5 s on two cores; the
// margins absorb a machine shared with compilers.
const (
	etcdTimeout      = 30 * time.Second
	apiserverTimeout = 60 * time.Second
	settleTimeout    = 60 * time.Second // the other components and the default ServiceAccount
	startAttempts    = 3                // retries after losing a port race
)

// Timings records how long startup took.
type Timings struct {
	// APIServerReady is from starting etcd to kube-apiserver's /readyz ok.
	APIServerReady time.Duration
	// Ready is from starting etcd to Start returning.
	Ready time.Duration
}

// Cluster is a running control plane. Its methods are safe for concurrent
// use.
type Cluster struct {
	log             *slog.Logger
	opts            Options
	dir             string
	binDir          string
	pki             *pki
	serverURL       string
	kcmURL          string
	adminKubeconfig string
	restConfig      *rest.Config
	client          kubernetes.Interface
	adminTransport  http.RoundTripper
	timings         Timings
	procs           []*childproc.Process // in start order
	userSeq         atomic.Int64

	stopOnce sync.Once
	stopErr  error
}

// errPortTaken marks a start attempt that lost a race for a port.
var errPortTaken = errors.New("port taken by another process")

// Start runs etcd and kube-apiserver, waits for /readyz, then runs the
// controller manager, the scheduler and kwok, and returns once they are
// healthy and the default ServiceAccount exists (pods can be created).
// ctx bounds startup only (building the binaries included); the cluster runs
// until Stop. On error nothing is left running.
func Start(ctx context.Context, o Options) (*Cluster, error) {
	if o.Dir == "" {
		return nil, errors.New("localcluster: Options.Dir is required")
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	if o.HPASyncPeriod <= 0 {
		o.HPASyncPeriod = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	binDir, err := resolveBinDir(ctx, o.BinDir, o.Logger, o.Stdout)
	if err != nil {
		return nil, err
	}
	for _, sub := range []string{"logs", "kubectl-cache"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
	}
	k, err := newPKI(filepath.Join(dir, "pki"))
	if err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	stages := filepath.Join(dir, "kwok-stages.yaml")
	if err := writeStages(stages); err != nil {
		return nil, fmt.Errorf("localcluster: %w", err)
	}
	for attempt := 1; ; attempt++ {
		c := &Cluster{log: o.Logger, opts: o, dir: dir, binDir: binDir, pki: k}
		err := c.start(ctx, stages)
		if err == nil {
			c.log.Info("local cluster ready", "server", c.serverURL, "dir", dir,
				"apiserverReady", c.timings.APIServerReady, "ready", c.timings.Ready)
			return c, nil
		}
		_ = c.Stop()
		if !errors.Is(err, errPortTaken) || attempt == startAttempts {
			return nil, fmt.Errorf("localcluster: %w", err)
		}
		c.log.Warn("local cluster lost a port race; retrying", "attempt", attempt, "err", err)
	}
}

// start runs one attempt on fresh ports and a fresh etcd data dir.
func (c *Cluster) start(ctx context.Context, stages string) error {
	p, err := newPorts()
	if err != nil {
		return err
	}
	c.serverURL = loopbackURL("https", p.apiserver)
	c.kcmURL = loopbackURL("https", p.controllerManager)
	kubeconfigs, err := c.writeKubeconfigs()
	if err != nil {
		return err
	}
	dataDir := filepath.Join(c.dir, "etcd")
	if err := os.RemoveAll(dataDir); err != nil {
		return fmt.Errorf("clear etcd data dir: %w", err)
	}

	began := time.Now()
	etcd, err := c.run("etcd", etcdArgs(dataDir, p))
	if err != nil {
		return err
	}
	if err := c.await(ctx, etcd, "healthy", etcdTimeout, c.httpCheck(loopbackURL("http", p.etcdClient)+"/health", false)); err != nil {
		return err
	}
	apiserver, err := c.run("kube-apiserver", apiserverArgs(c.dir, c.pki, p))
	if err != nil {
		return err
	}
	if err := c.await(ctx, apiserver, "ready", apiserverTimeout, c.httpCheck(c.serverURL+"/readyz", true)); err != nil {
		return err
	}
	c.timings.APIServerReady = time.Since(began)

	kcm, err := c.run("kube-controller-manager", controllerManagerArgs(c.dir, kubeconfigs["kube-controller-manager"], c.pki, p, c.opts))
	if err != nil {
		return err
	}
	sched, err := c.run("kube-scheduler", schedulerArgs(c.dir, kubeconfigs["kube-scheduler"], p))
	if err != nil {
		return err
	}
	podCIDR, err := PodPrefix()
	if err != nil {
		return err
	}
	kwok, err := c.run("kwok", kwokArgs(kubeconfigs["kwok"], stages, podCIDR), "KWOK_WORKDIR="+filepath.Join(c.dir, "kwok"))
	if err != nil {
		return err
	}
	if err := c.await(ctx, sched, "healthy", settleTimeout, c.httpCheck(loopbackURL("https", p.scheduler)+"/healthz", false)); err != nil {
		return err
	}
	if err := c.await(ctx, kcm, "healthy", settleTimeout, c.httpCheck(loopbackURL("https", p.controllerManager)+"/healthz", false)); err != nil {
		return err
	}
	if err := c.await(ctx, kcm, "creating the default ServiceAccount", settleTimeout, c.defaultServiceAccountExists); err != nil {
		return err
	}
	if kwok.Exited() {
		return kwok.Failure("exited during startup")
	}
	c.timings.Ready = time.Since(began)
	return nil
}

// writeKubeconfigs writes the admin and component kubeconfigs for the
// current server URL and sets up the admin client.
func (c *Cluster) writeKubeconfigs() (map[string]string, error) {
	admin, err := c.pki.ca.Issue(testpki.Leaf{CommonName: "gpuscale-admin", Organization: []string{"system:masters"}, Client: true})
	if err != nil {
		return nil, err
	}
	c.adminKubeconfig = filepath.Join(c.dir, "kubeconfigs", "admin.kubeconfig")
	if err := writeKubeconfig(c.adminKubeconfig, c.serverURL, c.pki.ca.CertPEM, admin, "gpuscale-admin"); err != nil {
		return nil, err
	}
	c.restConfig = restConfigFor(c.serverURL, c.pki.ca.CertPEM, admin)
	if c.client, err = kubernetes.NewForConfig(c.RESTConfig()); err != nil {
		return nil, fmt.Errorf("admin client: %w", err)
	}
	if c.adminTransport, err = rest.TransportFor(c.RESTConfig()); err != nil {
		return nil, fmt.Errorf("admin transport: %w", err)
	}
	paths := map[string]string{}
	for _, comp := range []struct{ name, user, group string }{
		{"kube-controller-manager", "system:kube-controller-manager", ""},
		{"kube-scheduler", "system:kube-scheduler", ""},
		// kwok patches the status of nodes and pods, and their leases, in
		// every namespace: cluster-admin is simpler than its own roles.
		{"kwok", "kwok-controller", "system:masters"},
	} {
		var groups []string
		if comp.group != "" {
			groups = []string{comp.group}
		}
		if paths[comp.name], err = c.componentKubeconfig(comp.name, comp.user, groups...); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

// run starts a component from the bin folder and remembers it for Stop.
func (c *Cluster) run(name string, args []string, env ...string) (*childproc.Process, error) {
	var extra io.Writer
	if c.opts.Stdout != nil {
		extra = c.opts.Stdout
	}
	p, err := childproc.Start(name, filepath.Join(c.binDir, name), args, env, filepath.Join(c.dir, "logs", name+".log"), extra)
	if err != nil {
		return nil, err
	}
	c.procs = append(c.procs, p)
	c.log.Debug("started component", "name", name, "pid", p.Pid())
	return p, nil
}

// await waits up to timeout for check; a component that died on a port
// conflict yields errPortTaken so that Start retries on fresh ports.
func (c *Cluster) await(ctx context.Context, p *childproc.Process, what string, timeout time.Duration, check func(context.Context) bool) error {
	ctx, cancel := context.WithTimeoutCause(ctx, timeout, fmt.Errorf("no success within %s", timeout))
	defer cancel()
	began := time.Now()
	err := p.WaitFor(ctx, what, 200*time.Millisecond, check)
	if err != nil && p.Exited() && p.BindFailed() {
		return fmt.Errorf("%w: %w", errPortTaken, err)
	}
	if err == nil {
		c.log.Debug("component ready", "name", p.Name(), "condition", what, "waited", time.Since(began))
	}
	return err
}

// Stop stops every component, clients first, and waits for them to exit.
// Dir is left in place for post-mortems. Stop is idempotent.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		// Stop kwok, the scheduler and the controller manager together, then
		// the API server, then etcd, so that no client logs a storm of
		// connection errors into the logs worth reading.
		var clients, servers []*childproc.Process
		for _, p := range c.procs {
			switch p.Name() {
			case "etcd", "kube-apiserver":
				servers = append([]*childproc.Process{p}, servers...)
			default:
				clients = append(clients, p)
			}
		}
		errs := make([]error, len(clients))
		var wg sync.WaitGroup
		for i, p := range clients {
			wg.Go(func() { errs[i] = p.Stop() })
		}
		wg.Wait()
		for _, p := range servers {
			errs = append(errs, p.Stop())
		}
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}

// Client returns a cluster-admin clientset.
func (c *Cluster) Client() kubernetes.Interface { return c.client }

// Timings reports how long startup took.
func (c *Cluster) Timings() Timings { return c.timings }

// PID is the process id of the running component named (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok), 0 if
// there is none: a benchmark reads its CPU time from /proc.
func (c *Cluster) PID(component string) int {
	for _, p := range c.procs {
		if p.Name() == component && !p.Exited() {
			return p.Pid()
		}
	}
	return 0
}

// Dir returns the absolute work directory; component logs are in Dir/logs.
func (c *Cluster) Dir() string { return c.dir }

// ControllerManagerURL is the controller manager's secure port (its
// /metrics, say: the HPA controller's work queue). It serves a self-signed
// certificate and authorizes through the API server.
func (c *Cluster) ControllerManagerURL() string { return c.kcmURL }

// KubectlPath returns the path of the kubectl binary matching the cluster.
func (c *Cluster) KubectlPath() string { return filepath.Join(c.binDir, "kubectl") }

// Kubectl runs kubectl as cluster-admin and returns its standard output. Its
// discovery cache lives in Dir, not in ~/.kube.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath(), append([]string{"--kubeconfig=" + c.adminKubeconfig}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(c.dir, "kubectl-cache"))
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := errors.AsType[*exec.ExitError](err); ok {
			stderr = strings.TrimSpace(string(ee.Stderr))
		}
		return out, fmt.Errorf("kubectl %v: %w: %s", args, err, stderr)
	}
	return out, nil
}
