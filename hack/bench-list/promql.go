package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// promqlOptions are the flags --source=promql reads.
type promqlOptions struct {
	Sizes    []int
	Metrics  []string
	Requests int
	// Interval is Prometheus's scrape interval.
	Interval time.Duration
	// Reuse lets gpuscale reuse answers (--promql-reuse).
	Reuse  bool
	Accept string
	Dir    string
	// AdapterBinary is gpuscale's adapter ("" builds this tree's),
	// PABinary prometheus-adapter's ("" builds v0.12.0).
	AdapterBinary, PABinary string
}

// prometheus-adapter's Service and APIService, as its chart names them.
const (
	paNamespace  = "monitoring"
	paService    = "prometheus-adapter"
	paAPIService = "v1beta1.custom.metrics.k8s.io"
	paBuild      = "hack/prometheus-adapter-build.sh"
	// paLookback is Prometheus's own default lookback, which
	// prometheus-adapter's queries get (gpuscale sends its
	// --max-staleness with each query).
	paLookback = 5 * time.Minute
)

// promqlBench times gpuscale's PromQL source beside prometheus-adapter on
// one Prometheus, through one aggregator.
type promqlBench struct {
	*bench
	o     promqlOptions
	paBin string
	prom  *devenv.Prometheus
	expo  *exposition
	pa    *childproc.Process
	// paPort is where prometheus-adapter serves.
	paPort int
}

// runPromQL is bench-list --source=promql: one report of every size and
// metric in o.
func runPromQL(ctx context.Context, log *slog.Logger, o promqlOptions) error {
	if _, err := paRules(o.Metrics); err != nil {
		return err
	}
	// First: a build of prometheus-adapter takes minutes when not cached.
	paBin, err := prometheusAdapterBinary(ctx, o.PABinary)
	if err != nil {
		return err
	}
	log.Info("starting the control plane", "dir", o.Dir)
	env, err := devenv.Up(ctx, devenv.Options{Dir: filepath.Join(o.Dir, "env"), Nodes: 1, Logger: log, AdapterBinary: o.AdapterBinary})
	if err != nil {
		return err
	}
	defer env.Down()
	pb, err := startPromQL(ctx, env, log, o)
	if err != nil {
		return err
	}
	defer pb.close()
	pb.paBin = paBin
	var results []pairResult
	for _, n := range o.Sizes {
		rs, err := pb.measure(ctx, n)
		if err != nil {
			return fmt.Errorf("%d pods: %w", n, err)
		}
		for _, r := range rs {
			fmt.Println(strings.Join(r.lines(), "\n"))
		}
		results = append(results, rs...)
	}
	report := filepath.Join(o.Dir, "report.md")
	if err := os.WriteFile(report, []byte(promqlMarkdown(results, o.Interval, o.Reuse)), 0o644); err != nil {
		return err
	}
	fmt.Println("report:", report)
	return nil
}

// prometheusAdapterBinary is flag, else what hack/prometheus-adapter-build.sh
// builds (at once when cached).
func prometheusAdapterBinary(ctx context.Context, flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := localcluster.RunBuildScript(ctx, root, paBuild, os.Stderr)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "prometheus-adapter"), nil
}

// startPromQL replaces the embedded adapter devenv.Up started with one
// reading a Prometheus that scrapes the exposition alone: the Prometheus
// address exists only once the environment does.
func startPromQL(ctx context.Context, env *devenv.Env, log *slog.Logger, o promqlOptions) (*promqlBench, error) {
	if err := env.StopAdapter(); err != nil {
		return nil, err
	}
	expo, err := startExposition(log)
	if err != nil {
		return nil, err
	}
	pb := &promqlBench{o: o, expo: expo}
	pb.prom, err = env.StartServer(ctx, "prometheus", devenv.ServerOptions{Lookback: paLookback, ScrapeInterval: o.Interval,
		Static: []string{expo.addr}, StaticOnly: true})
	if err != nil {
		pb.close()
		return nil, err
	}
	// 0: answers are shared only while in flight, so every timed list is
	// a query, as prometheus-adapter's are.
	reuse := time.Duration(0)
	if o.Reuse {
		reuse = o.Interval
	}
	args := []string{"--source=prometheus", "--prometheus-url=" + pb.prom.URL, "--max-staleness=" + (3 * o.Interval).String(),
		"--prometheus-scrape-interval=" + reuse.String()}
	log.Info("starting gpuscale's adapter on prometheus", "args", args)
	if err := env.StartAdapterWith(ctx, args); err != nil {
		pb.close()
		return nil, err
	}
	pb.bench, err = newBench(env, log, 0, o.Dir)
	if err != nil {
		pb.close()
		return nil, err
	}
	pb.unscraped = true
	return pb, nil
}

func (pb *promqlBench) close() {
	if pb.pa != nil {
		_ = pb.pa.Stop()
		pb.pa = nil
	}
	if pb.prom != nil {
		_ = pb.prom.Close()
	}
	pb.expo.close()
}

// measure creates a namespace of n Ready pods, puts their series in the
// exposition, and times both adapters' lists of each metric.
func (pb *promqlBench) measure(ctx context.Context, n int) ([]pairResult, error) {
	ns := fmt.Sprintf("promql-%d", n)
	if _, err := pb.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := pb.createPods(ctx, ns, n); err != nil {
		return nil, err
	}
	pods, err := pb.waitReady(ctx, ns, n)
	if err != nil {
		return nil, err
	}
	served := make([]expoPod, len(pods))
	for i, p := range pods {
		served[i] = expoPod{Namespace: ns, Name: p.Name, Node: p.Spec.NodeName, Index: i}
	}
	pb.expo.add(served)
	pb.log.Info("pods Ready and exposed", "namespace", ns, "pods", n)
	if err := pb.waitSeries(ctx, ns, n); err != nil {
		return nil, err
	}
	// prometheus-adapter learns its metrics from the series present when
	// it starts (and at each relist): hence now.
	if pb.pa == nil {
		if err := pb.startPA(ctx); err != nil {
			return nil, err
		}
	}
	for _, metric := range pb.o.Metrics {
		for _, s := range promqlSides {
			if err := pb.waitAll(ctx, s, ns, metric, n); err != nil {
				return nil, err
			}
		}
	}
	accept, err := pb.encoding(ctx, ns, pb.o.Metrics[0])
	if err != nil {
		return nil, err
	}
	var out []pairResult
	for _, metric := range pb.o.Metrics {
		r, err := pb.alternate(ctx, ns, metric, n, accept)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", metric, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// waitSeries waits until Prometheus holds every metric's series of the n
// pods of ns.
func (pb *promqlBench) waitSeries(ctx context.Context, ns string, n int) error {
	var got float64
	for _, m := range pb.o.Metrics {
		q := fmt.Sprintf(`count(%s{namespace=%q})`, promqlSeries[m].Series, ns)
		err := wait.PollUntilContextTimeout(ctx, time.Second, 5*time.Minute, true, func(ctx context.Context) (bool, error) {
			v, _, err := pb.prom.Scalar(ctx, q)
			got = v
			return err == nil && int(v) == n, nil
		})
		if err != nil {
			return fmt.Errorf("prometheus: %s is %v, want %d: %w", q, got, n, err)
		}
	}
	return nil
}

// waitAll waits until side's list of the namespace's pods names all n.
func (pb *promqlBench) waitAll(ctx context.Context, s promqlSide, ns, metric string, n int) error {
	got := 0
	var last error
	start := time.Now()
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := pb.listAt(ctx, s.Version, acceptJSON, ns, metric, "app="+appLabel)
		if err != nil {
			last = err
			return false, nil // NotFound until the data are there
		}
		got, last = answerPods(s.Version, body)
		return last == nil && got == n, nil
	})
	if err != nil {
		return fmt.Errorf("%s's list of %s names %d of %d pods (last error: %v): %w", s.Adapter, metric, got, n, last, err)
	}
	pb.log.Info("full list served", "adapter", s.Adapter, "metric", metric, "pods", n, "after", time.Since(start).Round(time.Second))
	return nil
}

// encoding is the Accept header both adapters answer in: --accept's, or
// JSON if one of them answers protobuf in another encoding.
func (pb *promqlBench) encoding(ctx context.Context, ns, metric string) (string, error) {
	if pb.o.Accept != acceptProtobuf {
		return pb.o.Accept, nil
	}
	for _, s := range promqlSides {
		_, err := pb.listAt(ctx, s.Version, acceptProtobuf, ns, metric, "app="+appLabel)
		if errors.Is(err, errWrongEncoding) {
			pb.log.Warn("an adapter answers no protobuf: both are timed in JSON", "adapter", s.Adapter, "err", err)
			return acceptJSON, nil
		}
		if err != nil {
			return "", err
		}
	}
	return acceptProtobuf, nil
}

// startPA starts prometheus-adapter, serving pb.o.Metrics from the rules
// paRules writes, with its own serving certificate, and registers it as
// custom.metrics.k8s.io/v1beta1 through the aggregator, beside gpuscale's
// v1beta2 (docs/migrating-from-prometheus-adapter.md).
func (pb *promqlBench) startPA(ctx context.Context) error {
	dir := filepath.Join(pb.o.Dir, "prometheus-adapter")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rules, err := paRules(pb.o.Metrics)
	if err != nil {
		return err
	}
	certPEM, keyPEM, _, err := pb.env.Cluster.ServingCerts(paService + "." + paNamespace + ".svc")
	if err != nil {
		return err
	}
	files := map[string][]byte{"config.yaml": rules, "tls.crt": certPEM, "tls.key": keyPEM}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return err
	}
	pb.paPort = ports[0]
	proc, err := childproc.Start(paService, pb.paBin, paArgs(dir, pb.env.Cluster.AdminKubeconfig(), pb.prom.URL, pb.paPort), nil,
		filepath.Join(dir, "prometheus-adapter.log"), nil)
	if err != nil {
		return err
	}
	pb.pa = proc
	if err := pb.registerPA(ctx); err != nil {
		return err
	}
	return pb.waitPA(ctx)
}

// paArgs are prometheus-adapter v0.12.0's flags (its cmd/adapter and
// custom-metrics-apiserver's options): delegated authentication and
// authorization as gpuscale's adapter has them (the request-header CA
// from kube-system's extension-apiserver-authentication), listing pods
// with the kubeconfig given. Its relist of the series is pushed past the
// run: it costs per minute, not per list, and a relist inside the timed
// lists would be billed to them.
func paArgs(dir, kubeconfig, promURL string, port int) []string {
	return []string{"--secure-port=" + strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--tls-cert-file=" + filepath.Join(dir, "tls.crt"), "--tls-private-key-file=" + filepath.Join(dir, "tls.key"),
		"--lister-kubeconfig=" + kubeconfig, "--authentication-kubeconfig=" + kubeconfig, "--authorization-kubeconfig=" + kubeconfig,
		"--prometheus-url=" + promURL, "--config=" + filepath.Join(dir, "config.yaml"), "--metrics-relist-interval=1h", "--v=1"}
}

// registerPA points custom.metrics.k8s.io/v1beta1 at prometheus-adapter
// through an ExternalName Service, as devenv does gpuscale's (the
// aggregator refuses loopback Endpoints); the caBundle stays the cluster
// CA, which signed its certificate.
func (pb *promqlBench) registerPA(ctx context.Context) error {
	_, err := pb.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: paNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: paService, Namespace: paNamespace},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost",
			Ports: []corev1.ServicePort{{Name: "https", Port: int32(pb.paPort)}}},
	}
	if _, err := pb.client.CoreV1().Services(paNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("prometheus-adapter service: %w", err)
	}
	patch := fmt.Sprintf(`{"spec":{"service":{"namespace":%q,"name":%q,"port":%d}}}`, paNamespace, paService, pb.paPort)
	if out, err := pb.env.Cluster.Kubectl(ctx, "patch", "apiservice", paAPIService, "--type=merge", "-p", patch); err != nil {
		return fmt.Errorf("APIService %s to prometheus-adapter: %w: %s", paAPIService, err, out)
	}
	return nil
}

// waitPA waits until the aggregator routes v1beta1 to prometheus-adapter
// and its discovery names every metric.
func (pb *promqlBench) waitPA(ctx context.Context) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		if pb.pa.Exited() {
			return false, pb.pa.Failure("exited")
		}
		var body []byte
		body, last = pb.client.CoreV1().RESTClient().Get().AbsPath("/apis/custom.metrics.k8s.io/v1beta1").DoRaw(ctx)
		if last != nil {
			return false, nil
		}
		var l metav1.APIResourceList
		if last = json.Unmarshal(body, &l); last != nil {
			return false, nil
		}
		for _, m := range pb.o.Metrics {
			if !hasResource(l, "pods/"+m) {
				last = fmt.Errorf("discovery has no pods/%s", m)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("prometheus-adapter not serving through the aggregator (last: %v): %w; see %s", last, err, pb.pa.LogPath())
	}
	pb.log.Info("prometheus-adapter serving", "version", "v1beta1", "port", pb.paPort)
	return nil
}

func hasResource(l metav1.APIResourceList, name string) bool {
	for _, r := range l.APIResources {
		if r.Name == name {
			return true
		}
	}
	return false
}
