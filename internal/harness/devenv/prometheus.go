package devenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/internal/harness/childproc"
	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
)

// Prometheus is a Prometheus-compatible server scraping the environment
// on loopback: the exporters and the annotated inference pods, kept up to
// date from the kube-apiserver's pods. It is Prometheus (Debian's
// prometheus package, or any prometheus binary on PATH) or VictoriaMetrics'
// single-node server (StartVictoriaMetrics).
type Prometheus struct {
	// URL is the HTTP API's base, e.g. http://127.0.0.1:40123.
	URL string
	// Name is the server's: prometheus or victoria-metrics.
	Name string

	bin, dir, config string
	port             int
	stopSync         context.CancelFunc
	proc             *childproc.Process
	args             func(lookback time.Duration) []string
	ready            string // the path answering 200 once it is ready
}

// VictoriaMetricsEnv names a victoria-metrics binary to use instead of
// the one hack/victoriametrics-build.sh builds.
const VictoriaMetricsEnv = "GPUSCALE_VICTORIAMETRICS"

// VictoriaMetricsBinary returns $GPUSCALE_VICTORIAMETRICS, else the
// victoria-metrics binary hack/victoriametrics-build.sh builds from its Go
// module (v1.151.0; at once when cached).
func VictoriaMetricsBinary(ctx context.Context) (string, error) {
	if p := os.Getenv(VictoriaMetricsEnv); p != "" {
		return p, nil
	}
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", err
	}
	dir, err := localcluster.RunBuildScript(ctx, root, "hack/victoriametrics-build.sh", nil)
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "victoria-metrics"), nil
}

// PrometheusBinary is the prometheus executable: $GPUSCALE_PROMETHEUS, else
// prometheus on PATH; "" when there is none.
func PrometheusBinary() string {
	if p := os.Getenv("GPUSCALE_PROMETHEUS"); p != "" {
		return p
	}
	p, _ := exec.LookPath("prometheus")
	return p
}

// ServerOptions configure a Prometheus-compatible server.
type ServerOptions struct {
	// Lookback is the server's lookback (staleness) for instant queries.
	Lookback time.Duration
	// ScrapeInterval is the scrape interval of every job; 0: 1s.
	ScrapeInterval time.Duration
	// Static are host:port targets scraped, with honor_labels, in a job
	// of their own (static) besides the environment's.
	Static []string
	// StaticOnly scrapes Static alone: the environment's target files stay
	// empty and are not synced from the pods. The sync lists every pod of
	// the cluster twice a second, a load of its own on the kube-apiserver
	// once there are thousands of pods that need no scraping.
	StaticOnly bool
}

// StartServer starts the server named (prometheus or victoria-metrics)
// with opts; see StartPrometheus and StartVictoriaMetrics.
func (e *Env) StartServer(ctx context.Context, name string, opts ServerOptions) (*Prometheus, error) {
	switch name {
	case "prometheus":
		return e.startPrometheus(ctx, opts)
	case "victoria-metrics":
		return e.startVictoriaMetrics(ctx, opts)
	}
	return nil, fmt.Errorf("devenv: no server %q (prometheus or victoria-metrics)", name)
}

// PID is the server's process id, 0 when it is stopped.
func (p *Prometheus) PID() int {
	if p.proc == nil {
		return 0
	}
	return p.proc.Pid()
}

// StartPrometheus writes a scrape config for the environment (1s scrape
// interval, lookback delta lookback) under Dir/prometheus, starts syncing
// its targets and starts the server on a free loopback port, returning once
// it is ready. Close stops both.
func (e *Env) StartPrometheus(ctx context.Context, lookback time.Duration) (*Prometheus, error) {
	return e.startPrometheus(ctx, ServerOptions{Lookback: lookback})
}

func (e *Env) startPrometheus(ctx context.Context, opts ServerOptions) (*Prometheus, error) {
	bin := PrometheusBinary()
	if bin == "" {
		return nil, errors.New("devenv: no prometheus binary (apt-get install prometheus, or set GPUSCALE_PROMETHEUS)")
	}
	p, err := e.newServer("prometheus", bin, opts)
	if err != nil {
		return nil, err
	}
	p.ready = "/-/ready"
	p.args = func(lookback time.Duration) []string {
		return []string{"--config.file=" + p.config, "--storage.tsdb.path=" + filepath.Join(p.dir, "data"),
			"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.port), "--query.lookback-delta=" + lookback.String(),
			"--storage.tsdb.retention.time=2h"}
	}
	return p, e.startServer(ctx, p, opts)
}

// StartVictoriaMetrics is StartPrometheus with VictoriaMetrics' single-node
// server (VictoriaMetricsBinary) reading the same scrape configuration: the
// PromQL source's other backend. File targets are re-read every second.
//
// VictoriaMetrics makes a scraped sample searchable only once its
// in-memory buffer is flushed, up to 2 s later (pendingRowsFlushInterval),
// and evaluates a query asked for the last -search.latencyOffset (default
// 30 s) that long ago instead, so that it never reads that incomplete
// tail. At 0 s, a query at now with a lookback of a few 1 s scrapes finds
// the newest searchable sample outside its window every few reads: empty
// answers, served as NotFound (issue #28). The offset here is that buffer
// plus one scrape interval, a few seconds instead of the default's 30.
func (e *Env) StartVictoriaMetrics(ctx context.Context, lookback time.Duration) (*Prometheus, error) {
	return e.startVictoriaMetrics(ctx, ServerOptions{Lookback: lookback})
}

// victoriaMetricsBuffer is how long VictoriaMetrics may hold a sample
// before it is searchable (lib/storage's pendingRowsFlushInterval).
const victoriaMetricsBuffer = 2 * time.Second

func (e *Env) startVictoriaMetrics(ctx context.Context, opts ServerOptions) (*Prometheus, error) {
	bin, err := VictoriaMetricsBinary(ctx)
	if err != nil {
		return nil, fmt.Errorf("devenv: victoria-metrics: %w", err)
	}
	p, err := e.newServer("victoria-metrics", bin, opts)
	if err != nil {
		return nil, err
	}
	p.ready = "/health"
	latency := victoriaMetricsBuffer + scrapeInterval(opts)
	p.args = func(lookback time.Duration) []string {
		return []string{"-promscrape.config=" + p.config, "-storageDataPath=" + filepath.Join(p.dir, "data"),
			"-httpListenAddr=127.0.0.1:" + strconv.Itoa(p.port), "-search.maxStalenessInterval=" + lookback.String(),
			"-search.latencyOffset=" + latency.String(), "-promscrape.fileSDCheckInterval=1s", "-retentionPeriod=1d",
			"-loggerLevel=WARN"}
	}
	return p, e.startServer(ctx, p, opts)
}

// newServer prepares a server's folder, its scrape configuration and a
// free port.
func (e *Env) newServer(name, bin string, opts ServerOptions) (*Prometheus, error) {
	dir := filepath.Join(e.opts.Dir, name)
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	cfg, err := e.prometheusConfig(dir, name, opts)
	if err != nil {
		return nil, err
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	return &Prometheus{URL: "http://127.0.0.1:" + strconv.Itoa(port), Name: name, bin: bin, dir: dir, config: cfg, port: port}, nil
}

// startServer writes the targets, starts syncing them (unless
// opts.StaticOnly) and starts p.
func (e *Env) startServer(ctx context.Context, p *Prometheus, opts ServerOptions) error {
	dir := p.dir
	syncCtx, cancel := context.WithCancel(context.Background())
	p.stopSync = cancel
	if opts.StaticOnly {
		if err := writeTargetFiles(dir, map[string][]fileSDGroup{"exporters.json": {}, "inference.json": {}}); err != nil {
			cancel()
			return fmt.Errorf("devenv: %s targets: %w", p.Name, err)
		}
	} else {
		if err := e.writeTargets(ctx, dir, exporterDiscovery()); err != nil {
			cancel()
			return fmt.Errorf("devenv: %s targets: %w", p.Name, err)
		}
		go e.syncTargets(syncCtx, dir, 500*time.Millisecond)
	}
	if err := p.Start(ctx, opts.Lookback); err != nil {
		cancel()
		return err
	}
	return nil
}

// Close stops the server and the target sync.
func (p *Prometheus) Close() error {
	p.stopSync()
	return p.Stop()
}

// Start (re)starts a stopped server on the same port and storage.
func (p *Prometheus) Start(ctx context.Context, lookback time.Duration) error {
	if p.proc != nil {
		return fmt.Errorf("devenv: %s already running", p.Name)
	}
	proc, err := childproc.Start(p.Name, p.bin, p.args(lookback), nil, filepath.Join(p.dir, p.Name+".log"), nil)
	if err != nil {
		return fmt.Errorf("devenv: %s: %w", p.Name, err)
	}
	p.proc = proc
	ready := testenv.HTTPOK(&http.Client{Timeout: 2 * time.Second}, p.URL+p.ready)
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-proc.Done():
			return false, fmt.Errorf("%s exited: %w", p.Name, proc.Err())
		default:
		}
		return ready(ctx), nil
	})
	if err != nil {
		_ = p.Stop()
		return fmt.Errorf("devenv: %s not ready: %w; see %s", p.Name, err, filepath.Join(p.dir, p.Name+".log"))
	}
	return nil
}

// Stop stops the server (SIGTERM, then SIGKILL after 5s); its data stays
// for the next Start.
func (p *Prometheus) Stop() error {
	if p.proc == nil {
		return nil
	}
	err := p.proc.Stop()
	p.proc = nil
	return err
}

// prometheusConfig writes prometheus.yml. Debian's prometheus is built
// without kubernetes_sd_configs, so targets come from files that
// syncTargets keeps up to date from the pods, found exactly as the
// embedded adapter finds them (pkg/adapter/discovery). Pod IPs are loopback
// addresses of this host, so targets are scraped directly. The exporter job
// honours the exporter's namespace and pod labels (the pods using each
// GPU); inference targets carry their pod's namespace and pod, as the PromQL
// source's default queries expect.
func (e *Env) prometheusConfig(dir, server string, opts ServerOptions) (string, error) {
	path := filepath.Join(dir, "prometheus.yml")
	return path, os.WriteFile(path, []byte(scrapeConfig(dir, server, opts)), 0o600)
}

// scrapeConfig is server's configuration. VictoriaMetrics' strict parser
// refuses file_sd_configs' refresh_interval (it re-reads the files every
// -promscrape.fileSDCheckInterval instead), so only Prometheus gets it.
func scrapeConfig(dir, server string, opts ServerOptions) string {
	interval := scrapeInterval(opts)
	refresh := ", refresh_interval: 1s"
	if server == "victoria-metrics" {
		refresh = ""
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[2]s
scrape_configs:
- job_name: gpuscale-exporter
  honor_labels: true
  file_sd_configs: [{files: [%[3]q]%[5]s}]
- job_name: inference
  file_sd_configs: [{files: [%[4]q]%[5]s}]
`, model.Duration(interval), model.Duration(interval*9/10), filepath.Join(dir, "exporters.json"), filepath.Join(dir, "inference.json"), refresh)
	if len(opts.Static) > 0 {
		targets, _ := json.Marshal(opts.Static)
		cfg += fmt.Sprintf("- job_name: static\n  honor_labels: true\n  static_configs: [{targets: %s}]\n", targets)
	}
	return cfg
}

// scrapeInterval is opts' scrape interval, 1s unless set.
func scrapeInterval(opts ServerOptions) time.Duration {
	if opts.ScrapeInterval <= 0 {
		return time.Second
	}
	return opts.ScrapeInterval
}

// fileSDGroup is one entry of a file_sd_configs file.
type fileSDGroup struct {
	Targets []string          `json:"targets"`
	Labels  map[string]string `json:"labels"`
}

// syncTargets rewrites the target files every interval until ctx is done.
func (e *Env) syncTargets(ctx context.Context, dir string, interval time.Duration) {
	cfg := exporterDiscovery()
	for {
		if err := e.writeTargets(ctx, dir, cfg); err != nil && ctx.Err() == nil {
			e.log.Warn("prometheus targets", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}

// exporterDiscovery finds targets as the adapter started by StartAdapter does.
func exporterDiscovery() discovery.Config {
	return discovery.Config{ExporterSelector: labels.SelectorFromSet(labels.Set{exporterLabel: ExporterName}),
		ExporterNamespace: Namespace, ExporterDaemonSet: ExporterName, ExporterPort: 9400, ExporterPath: "/metrics"}
}

func (e *Env) writeTargets(ctx context.Context, dir string, cfg discovery.Config) error {
	list, err := e.Cluster.Client().CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods := make([]*corev1.Pod, len(list.Items))
	for i := range list.Items {
		pods[i] = &list.Items[i]
	}
	targets, _ := discovery.Targets(pods, cfg)
	groups := map[string][]fileSDGroup{"exporters.json": {}, "inference.json": {}}
	for _, t := range targets {
		u, err := url.Parse(t.URL)
		if err != nil {
			continue
		}
		g := fileSDGroup{Targets: []string{u.Host}, Labels: map[string]string{"__scheme__": u.Scheme, "__metrics_path__": u.Path}}
		file := "exporters.json"
		if t.Kind == discovery.KindInference {
			g.Labels["namespace"], g.Labels["pod"] = t.Namespace, t.Pod
			file = "inference.json"
		}
		groups[file] = append(groups[file], g)
	}
	return writeTargetFiles(dir, groups)
}

// writeTargetFiles writes each file_sd_configs file of groups in dir.
func writeTargetFiles(dir string, groups map[string][]fileSDGroup) error {
	for file, gs := range groups {
		b, err := json.Marshal(gs)
		if err != nil {
			return err
		}
		// Written aside and renamed: Prometheus never reads half a file.
		tmp := filepath.Join(dir, "."+file)
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
			return err
		}
	}
	return nil
}

// Scalar runs an instant query whose answer is at most one sample and
// returns its value; ok is false when the answer has none. More than one
// sample, an answer that is not a success or a value that is not a number
// is an error.
func (p *Prometheus) Scalar(ctx context.Context, query string) (v float64, ok bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.URL+"/api/v1/query?query="+url.QueryEscape(query), nil)
	if err != nil {
		return 0, false, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false, fmt.Errorf("query %s: %w", query, err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string `json:"status"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return 0, false, fmt.Errorf("query %s: %w", query, err)
	}
	switch {
	case r.Status != "success":
		return 0, false, fmt.Errorf("query %s: status %q", query, r.Status)
	case len(r.Data.Result) == 0:
		return 0, false, nil
	case len(r.Data.Result) > 1:
		return 0, false, fmt.Errorf("query %s: %d samples, want one", query, len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	v, err = strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, false, fmt.Errorf("query %s: %w", query, err)
	}
	return v, true, nil
}
