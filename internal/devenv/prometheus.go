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

	"github.com/gpuscale/gpuscale/internal/childproc"
	"github.com/gpuscale/gpuscale/internal/testenv"
	"github.com/gpuscale/gpuscale/pkg/discovery"
)

// Prometheus is a Prometheus server (Debian's prometheus package, or any
// prometheus binary on PATH) scraping the environment on loopback: the
// exporters and the annotated inference pods, kept up to date from the
// kube-apiserver's pods.
type Prometheus struct {
	// URL is the HTTP API's base, e.g. http://127.0.0.1:40123.
	URL string

	bin, dir, config string
	port             int
	stopSync         context.CancelFunc
	proc             *childproc.Process
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

// StartPrometheus writes a scrape config for the environment (1s scrape
// interval, lookback delta lookback) under Dir/prometheus, starts syncing
// its targets and starts the server on a free loopback port, returning once
// it is ready. Close stops both.
func (e *Env) StartPrometheus(ctx context.Context, lookback time.Duration) (*Prometheus, error) {
	bin := PrometheusBinary()
	if bin == "" {
		return nil, errors.New("devenv: no prometheus binary (apt-get install prometheus, or set GPUSCALE_PROMETHEUS)")
	}
	dir := filepath.Join(e.opts.Dir, "prometheus")
	if err := os.MkdirAll(filepath.Join(dir, "data"), 0o755); err != nil {
		return nil, err
	}
	cfg, err := e.prometheusConfig(dir)
	if err != nil {
		return nil, err
	}
	ports, err := testenv.FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	p := &Prometheus{URL: "http://127.0.0.1:" + strconv.Itoa(port), bin: bin, dir: dir, config: cfg, port: port}
	if err := e.writeTargets(ctx, dir, exporterDiscovery()); err != nil {
		return nil, fmt.Errorf("devenv: prometheus targets: %w", err)
	}
	syncCtx, cancel := context.WithCancel(context.Background())
	p.stopSync = cancel
	go e.syncTargets(syncCtx, dir, 500*time.Millisecond)
	if err := p.Start(ctx, lookback); err != nil {
		cancel()
		return nil, err
	}
	return p, nil
}

// Close stops the server and the target sync.
func (p *Prometheus) Close() error {
	p.stopSync()
	return p.Stop()
}

// Start (re)starts a stopped server on the same port and storage.
func (p *Prometheus) Start(ctx context.Context, lookback time.Duration) error {
	if p.proc != nil {
		return errors.New("devenv: prometheus already running")
	}
	proc, err := childproc.Start("prometheus", p.bin, []string{"--config.file=" + p.config, "--storage.tsdb.path=" + filepath.Join(p.dir, "data"),
		"--web.listen-address=127.0.0.1:" + strconv.Itoa(p.port), "--query.lookback-delta=" + lookback.String(),
		"--storage.tsdb.retention.time=2h"}, nil, filepath.Join(p.dir, "prometheus.log"), nil)
	if err != nil {
		return fmt.Errorf("devenv: prometheus: %w", err)
	}
	p.proc = proc
	ready := testenv.HTTPOK(&http.Client{Timeout: 2 * time.Second}, p.URL+"/-/ready")
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case <-proc.Done():
			return false, fmt.Errorf("prometheus exited: %w", proc.Err())
		default:
		}
		return ready(ctx), nil
	})
	if err != nil {
		_ = p.Stop()
		return fmt.Errorf("devenv: prometheus not ready: %w; see %s", err, filepath.Join(p.dir, "prometheus.log"))
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
// embedded adapter finds them (pkg/discovery). Pod IPs are loopback
// addresses of this host, so targets are scraped directly. The exporter job
// honours the exporter's namespace and pod labels (the pods using each
// GPU); inference targets carry their pod's namespace and pod, as the PromQL
// source's default queries expect.
func (e *Env) prometheusConfig(dir string) (string, error) {
	path := filepath.Join(dir, "prometheus.yml")
	return path, os.WriteFile(path, []byte(scrapeConfig(dir)), 0o600)
}

func scrapeConfig(dir string) string {
	return fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 900ms
scrape_configs:
- job_name: gpuscale-exporter
  honor_labels: true
  file_sd_configs: [{files: [%q], refresh_interval: 1s}]
- job_name: inference
  file_sd_configs: [{files: [%q], refresh_interval: 1s}]
`, filepath.Join(dir, "exporters.json"), filepath.Join(dir, "inference.json"))
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
