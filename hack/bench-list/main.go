// Command bench-list measures the HPA's Pods-metric call as users make it:
// `GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/NS/pods/*/METRIC`
// with a label selector, through a real kube-apiserver and its aggregation
// layer to the adapter, sequential requests over one kept-alive HTTP/2
// connection, for namespaces of 1,000 and 10,000 Ready pods that the
// adapter scrapes itself. These are the conditions of prometheus-adapter's
// figures in ../shared/anchors.md (make bench-list; docs/performance.md).
//
// With --source=promql (make bench-promql) it times instead gpuscale's
// PromQL source (v1beta2) and prometheus-adapter v0.12.0 (v1beta1) in turns
// through the same aggregator, both reading one Prometheus that scrapes one
// exposition of every pod's series (promql.go).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

func main() {
	if os.Getenv(podServerEnv) == "1" {
		if err := runPodServer(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench-list pod server:", err)
			os.Exit(1)
		}
		return
	}
	if err := run(parseFlags()); err != nil {
		fmt.Fprintln(os.Stderr, "bench-list:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	sizes, metrics, adEnv, adMem, adBin, accept, out string
	adArgs, kcmArgs, source, paBin                   string
	requests, hpas                                   int
	gap, interval, window, soakFor, hpaSync, measure time.Duration
	reuse                                            bool
	fleet                                            soakFleet
	set                                              map[string]bool // the flags given
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.sizes, "pods", "1000,10000", "Comma-separated namespace sizes to measure, in Ready pods.")
	flag.IntVar(&o.requests, "requests", 50, "Timed list requests per size, after 5 untimed ones.")
	flag.DurationVar(&o.gap, "list-gap", 0, "Time between the end of a timed list and the start of the next (0: back to back, which keeps the machine's cores busy with lists; an HPA lists a workload's pods once a sync period).")
	flag.StringVar(&o.metrics, "metrics", "inference_queue_depth,inference_ttft_seconds_p90", "Comma-separated Pods metrics to list.")
	flag.DurationVar(&o.interval, "scrape-interval", 30*time.Second, "The adapter's --scrape-interval: long, so that scrape cycles disturb the timed requests little.")
	flag.DurationVar(&o.window, "window", 2*time.Minute, "How long the timed requests wait for the adapter's history of every pod (its --ttft-window of samples) to fill.")
	flag.StringVar(&o.adEnv, "adapter-env", "", "Comma-separated NAME=value environment of the adapter, e.g. GOMEMLIMIT=270MiB.")
	flag.StringVar(&o.adMem, "adapter-memory-limit", "", "Run the adapter in a memory cgroup of its own with this limit (a quantity, e.g. 512Mi, or \"chart\" for the chart's adapter.resources.limits.memory), as its container is limited: the kernel kills it past the limit, and it sets its Go soft limit from it. Needs root and a writable cgroup file system.")
	flag.StringVar(&o.adBin, "adapter-binary", "", "An adapter binary to measure instead of building this tree's, e.g. another branch's for a before/after.")
	flag.StringVar(&o.accept, "accept", acceptProtobuf, "The timed lists' encoding: "+acceptProtobuf+" (what kube-controller-manager's HPA client asks for, its --kube-api-content-type default) or "+acceptJSON+" (kubectl get --raw and most other clients).")
	flag.StringVar(&o.out, "out", "_output/bench-list", "Directory for the environment's logs and report.md.")
	flag.DurationVar(&o.soakFor, "soak", 0, "Instead of timing lists, keep the largest --pods size and a hostile fleet scraped this long, and report the adapter's memory, scrape cycles and the healthy pods' staleness (make soak).")
	flag.IntVar(&o.hpas, "hpas", 0, "Instead of timing lists, create this many Deployments of one scraped pod, each with an HPA on inference_capacity_utilization (Object) and inference_queue_depth (Pods), and report the adapter's CPU beyond scraping, the metrics API's p99 and the HPA controller's queue lag (make bench-hpa).")
	flag.DurationVar(&o.hpaSync, "hpa-sync", 15*time.Second, "With --hpas, the HPA controller's --horizontal-pod-autoscaler-sync-period.")
	flag.DurationVar(&o.measure, "hpa-measure", 2*time.Minute, "With --hpas, how long the adapter's scraping, then the HPAs, are measured.")
	flag.StringVar(&o.adArgs, "adapter-args", "", "Comma-separated extra adapter flags, e.g. --gc-percent=50 for an A/B of one flag on one tree.")
	flag.StringVar(&o.kcmArgs, "controller-manager-args", "", "Comma-separated extra kube-controller-manager flags, e.g. --kube-api-qps=200,--kube-api-burst=300.")
	flag.StringVar(&o.source, "source", "embedded", "What is timed: embedded (the adapter scrapes every pod itself) or promql (gpuscale's --source=prometheus beside prometheus-adapter v0.12.0, on one Prometheus scraping one exposition of every pod's series; make bench-promql). With promql, --scrape-interval is Prometheus's (default 5s) and --metrics defaults to "+strings.Join(promqlMetricNames(), ",")+".")
	flag.BoolVar(&o.reuse, "promql-reuse", false, "With --source=promql, let gpuscale reuse an answer for a quarter of the scrape interval, as identical reads share one in a cluster; off, every list is a query.")
	flag.StringVar(&o.paBin, "prometheus-adapter-binary", "", "With --source=promql, a prometheus-adapter binary instead of the v0.12.0 hack/prometheus-adapter-build.sh builds.")
	flag.IntVar(&o.fleet.HostilePerKind, "soak-hostile-per-kind", 10, "With --soak, pods of each of the first round's hostile kinds.")
	flag.IntVar(&o.fleet.TenantNamespaces, "soak-tenant-namespaces", 4, "With --soak, namespaces of the second round's tenant kinds (internal/harness/hostile.TenantKinds).")
	flag.IntVar(&o.fleet.TenantPods, "soak-tenant-pods", 2000, "With --soak, pods in each tenant namespace: four of each kind at the per-scrape limits, the rest keeping all they may.")
	flag.IntVar(&o.fleet.HangAfterAnswer, "soak-hang-after-answer", 512, "With --soak, pods that answer once and then hang.")
	flag.IntVar(&o.fleet.Selectors, "soak-selectors", 1024, "With --soak, distinct label selectors asked of the healthy namespace once the fleet is up.")
	flag.Parse()
	o.set = map[string]bool{}
	flag.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	return o
}

func run(o options) error {
	if o.accept != acceptProtobuf && o.accept != acceptJSON {
		return fmt.Errorf("--accept must be %s or %s, got %q", acceptProtobuf, acceptJSON, o.accept)
	}
	if o.gap < 0 {
		return fmt.Errorf("--list-gap must not be negative, got %v", o.gap)
	}
	switch o.source {
	case "embedded":
	case "promql":
		po := promqlOptions{Metrics: promqlMetricNames(), Requests: o.requests, Interval: 5 * time.Second, Reuse: o.reuse,
			Accept: o.accept, AdapterBinary: o.adBin, PABinary: o.paBin}
		if o.set["metrics"] {
			po.Metrics = strings.Split(o.metrics, ",")
		}
		if o.set["scrape-interval"] {
			po.Interval = o.interval
		}
		return promqlMain(po, o.sizes, o.out)
	default:
		return fmt.Errorf("--source must be embedded or promql, got %q", o.source)
	}
	ns, err := podCounts(o.sizes)
	if err != nil {
		return err
	}
	// The pods are served by child processes (podserver.go), which raise
	// their own limit. The adapter, a child too, inherits this one: it
	// keeps a connection to every pod, up to scrape.DefaultMaxIdleConns,
	// besides its clients and informers (fdSlack).
	pods := sum(ns)
	if o.soakFor > 0 {
		pods = slices.Max(ns) + o.fleet.pods()
	}
	if err := raiseFileLimit(min(pods, scrape.DefaultMaxIdleConns) + fdSlack); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	dir, err := filepath.Abs(o.out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	env, memLimit, err := startEnv(ctx, o, ns, dir, log)
	if err != nil {
		return err
	}
	defer env.Down()

	b, err := newBench(env, log, max(o.window, ttftWindow(o.interval)), dir)
	if err != nil {
		return err
	}
	defer b.close()
	b.memLimit, b.accept, b.gap = memLimit, o.accept, o.gap
	switch {
	case o.soakFor > 0:
		return runSoak(ctx, b, o, slices.Max(ns), dir)
	case o.hpas > 0:
		return runHPAs(ctx, b, o, dir)
	}
	return runLists(ctx, b, o, ns, dir)
}

// ttftWindow is the adapter's --ttft-window: two samples at least, and no
// less than the adapter's default minute.
func ttftWindow(interval time.Duration) time.Duration { return max(time.Minute, 4*interval) }

// startEnv starts the control plane and the adapter, sized for the
// namespaces ns and the mode's workloads.
func startEnv(ctx context.Context, o options, ns []int, dir string, log *slog.Logger) (*devenv.Env, int64, error) {
	log.Info("starting the control plane and the adapter", "dir", dir)
	var adapterEnv []string
	if o.adEnv != "" {
		adapterEnv = strings.Split(o.adEnv, ",")
	}
	// Timing lists tolerates late scrapes; the soak judges freshness at
	// the adapter's default staleness, three intervals.
	staleness := 10 * o.interval
	if o.soakFor > 0 {
		staleness = 3 * o.interval
	}
	memLimit, err := adapterMemoryLimit(o.adMem)
	if err != nil {
		return nil, 0, err
	}
	env, err := devenv.Up(ctx, devenv.Options{Dir: filepath.Join(dir, "env"), Nodes: 1, Logger: log, AdapterEnv: adapterEnv, AdapterBinary: o.adBin,
		AdapterMemoryLimit: memLimit,
		HPASyncPeriod:      o.hpaSync, ControllerManagerArgs: splitArgs(o.kcmArgs),
		AdapterArgs: append([]string{"--scrape-interval=" + o.interval.String(), "--max-staleness=" + staleness.String(),
			"--ttft-window=" + ttftWindow(o.interval).String(),
			// Each size is one namespace, past the default per-namespace cap.
			"--max-targets-per-namespace=" + strconv.Itoa(max(slices.Max(ns), o.fleet.TenantPods, o.fleet.HangAfterAnswer, o.hpas)),
			// Every HPA's Deployment is in one namespace, past the
			// capacity signal's default bound on a namespace's workloads.
			"--capacity-max-workloads-per-namespace=" + strconv.Itoa(max(capacity.DefaultMaxTargetsPerNamespace, o.hpas)),
			"--capacity-max-workloads=" + strconv.Itoa(max(capacity.DefaultMaxTargets, o.hpas))}, splitArgs(o.adArgs)...)})
	if err != nil {
		return nil, 0, err
	}
	return env, memLimit, nil
}

// runSoak keeps n healthy pods and the hostile fleet scraped (--soak).
func runSoak(ctx context.Context, b *bench, o options, n int, dir string) error {
	rep, err := b.soak(ctx, n, o.fleet, o.interval, o.soakFor, 10*time.Second)
	if err != nil {
		return fmt.Errorf("soak: %w", err)
	}
	path, err := rep.write(dir)
	if err != nil {
		return err
	}
	report, _ := os.ReadFile(path)
	fmt.Printf("%s\nreport: %s\n", report, path)
	return nil
}

// runHPAs measures the adapter under --hpas HPAs.
func runHPAs(ctx context.Context, b *bench, o options, dir string) error {
	r, err := b.hpas(ctx, o.hpas, o.hpaSync, o.measure)
	if err != nil {
		return fmt.Errorf("%d HPAs: %w", o.hpas, err)
	}
	fmt.Println(r.line())
	report := filepath.Join(dir, "hpas.md")
	if err := os.WriteFile(report, []byte(r.markdown()), 0o644); err != nil {
		return err
	}
	fmt.Println("report:", report)
	return nil
}

// runLists times the metrics' lists at each namespace size.
func runLists(ctx context.Context, b *bench, o options, ns []int, dir string) error {
	var results []result
	for _, n := range ns {
		rs, err := b.measure(ctx, n, strings.Split(o.metrics, ","), o.requests)
		if err != nil {
			return fmt.Errorf("%d pods: %w", n, err)
		}
		for _, r := range rs {
			fmt.Println(r.line())
		}
		results = append(results, rs...)
	}
	report := filepath.Join(dir, "report.md")
	if err := os.WriteFile(report, []byte(markdown(results, o.interval)), 0o644); err != nil {
		return err
	}
	fmt.Println("report:", report)
	return nil
}

// podCounts parses --pods.
func podCounts(flag string) ([]int, error) {
	var ns []int
	for _, s := range strings.Split(flag, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--pods: %q is not a pod count", s)
		}
		ns = append(ns, n)
	}
	return ns, nil
}

// promqlMain runs --source=promql with o and the --pods and --out flags.
func promqlMain(o promqlOptions, sizes, out string) error {
	var err error
	if o.Sizes, err = podCounts(sizes); err != nil {
		return err
	}
	if o.Dir, err = filepath.Abs(out); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	return runPromQL(ctx, log, o)
}

// chartValues is the chart's values file, relative to the module's root
// (make runs this from there).
const chartValues = "deploy/helm/gpuscale/values.yaml"

// adapterMemoryLimit is the --adapter-memory-limit flag in bytes: 0 for
// none, the chart's adapter limit for "chart".
func adapterMemoryLimit(flag string) (int64, error) {
	if flag == "" {
		return 0, nil
	}
	if flag == "chart" {
		raw, err := os.ReadFile(chartValues)
		if err != nil {
			return 0, fmt.Errorf("--adapter-memory-limit=chart: %w", err)
		}
		var values struct {
			Adapter struct {
				Resources struct {
					Limits struct {
						Memory string `json:"memory"`
					} `json:"limits"`
				} `json:"resources"`
			} `json:"adapter"`
		}
		if err := yaml.Unmarshal(raw, &values); err != nil {
			return 0, fmt.Errorf("--adapter-memory-limit=chart: %s: %w", chartValues, err)
		}
		if flag = values.Adapter.Resources.Limits.Memory; flag == "" {
			return 0, fmt.Errorf("--adapter-memory-limit=chart: %s sets no adapter.resources.limits.memory", chartValues)
		}
	}
	q, err := resource.ParseQuantity(flag)
	if err != nil || q.Value() <= 0 {
		return 0, fmt.Errorf("--adapter-memory-limit: %q is not a memory size: %v", flag, err)
	}
	return q.Value(), nil
}

func sum(ns []int) int {
	t := 0
	for _, n := range ns {
		t += n
	}
	return t
}

// fdSlack is the open files a process needs besides its pods' sockets: the
// control plane's clients, the timed requests, logs and profiles.
const fdSlack = 1024

// raiseFileLimit lifts RLIMIT_NOFILE to at least n (root may raise the
// hard limit too); children inherit it.
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("open files limit: %w", err)
	}
	if lim.Cur >= uint64(n) {
		return nil
	}
	old := lim.Max
	lim.Cur = uint64(n)
	lim.Max = max(lim.Max, uint64(n))
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("raise the open files limit from %d to %d (a listener and a kept connection per pod; raise the hard limit first, or measure fewer pods): %w", old, n, err)
	}
	return nil
}

// splitArgs splits a comma-separated list of flags; none from "".
func splitArgs(list string) []string {
	if list == "" {
		return nil
	}
	return strings.Split(list, ",")
}
