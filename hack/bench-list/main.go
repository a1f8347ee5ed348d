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
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-list:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		sizes    = flag.String("pods", "1000,10000", "Comma-separated namespace sizes to measure, in Ready pods.")
		requests = flag.Int("requests", 50, "Timed list requests per size, after 5 untimed ones.")
		gap      = flag.Duration("list-gap", 0, "Time between the end of a timed list and the start of the next (0: back to back, which keeps the machine's cores busy with lists; an HPA lists a workload's pods once a sync period).")
		metrics  = flag.String("metrics", "inference_queue_depth,inference_ttft_seconds_p90", "Comma-separated Pods metrics to list.")
		interval = flag.Duration("scrape-interval", 30*time.Second, "The adapter's --scrape-interval: long, so that scrape cycles disturb the timed requests little.")
		window   = flag.Duration("window", 2*time.Minute, "How long the timed requests wait for the adapter's history of every pod (its --ttft-window of samples) to fill.")
		adEnv    = flag.String("adapter-env", "", "Comma-separated NAME=value environment of the adapter, e.g. GOMEMLIMIT=270MiB.")
		adMem    = flag.String("adapter-memory-limit", "", "Run the adapter in a memory cgroup of its own with this limit (a quantity, e.g. 512Mi, or \"chart\" for the chart's adapter.resources.limits.memory), as its container is limited: the kernel kills it past the limit, and it sets its Go soft limit from it. Needs root and a writable cgroup file system.")
		adBin    = flag.String("adapter-binary", "", "An adapter binary to measure instead of building this tree's, e.g. another branch's for a before/after.")
		accept   = flag.String("accept", acceptProtobuf, "The timed lists' encoding: "+acceptProtobuf+" (what kube-controller-manager's HPA client asks for, its --kube-api-content-type default) or "+acceptJSON+" (kubectl get --raw and most other clients).")
		out      = flag.String("out", "_output/bench-list", "Directory for the environment's logs and report.md.")
		soakFor  = flag.Duration("soak", 0, "Instead of timing lists, keep the largest --pods size and a hostile fleet scraped this long, and report the adapter's memory, scrape cycles and the healthy pods' staleness (make soak).")
		fleet    soakFleet
		hpas     = flag.Int("hpas", 0, "Instead of timing lists, create this many Deployments of one scraped pod, each with an HPA on inference_capacity_utilization (Object) and inference_queue_depth (Pods), and report the adapter's CPU beyond scraping, the metrics API's p99 and the HPA controller's queue lag (make bench-hpa).")
		hpaSync  = flag.Duration("hpa-sync", 15*time.Second, "With --hpas, the HPA controller's --horizontal-pod-autoscaler-sync-period.")
		measure  = flag.Duration("hpa-measure", 2*time.Minute, "With --hpas, how long the adapter's scraping, then the HPAs, are measured.")
		adArgs   = flag.String("adapter-args", "", "Comma-separated extra adapter flags, e.g. --gc-percent=50 for an A/B of one flag on one tree.")
		kcmArgs  = flag.String("controller-manager-args", "", "Comma-separated extra kube-controller-manager flags, e.g. --kube-api-qps=200,--kube-api-burst=300.")
		source   = flag.String("source", "embedded", "What is timed: embedded (the adapter scrapes every pod itself) or promql (gpuscale's --source=prometheus beside prometheus-adapter v0.12.0, on one Prometheus scraping one exposition of every pod's series; make bench-promql). With promql, --scrape-interval is Prometheus's (default 5s) and --metrics defaults to "+strings.Join(promqlMetricNames(), ",")+".")
		reuse    = flag.Bool("promql-reuse", false, "With --source=promql, let gpuscale reuse an answer for a quarter of the scrape interval, as identical reads share one in a cluster; off, every list is a query.")
		paBin    = flag.String("prometheus-adapter-binary", "", "With --source=promql, a prometheus-adapter binary instead of the v0.12.0 hack/prometheus-adapter-build.sh builds.")
	)
	flag.IntVar(&fleet.HostilePerKind, "soak-hostile-per-kind", 10, "With --soak, pods of each of the first round's hostile kinds.")
	flag.IntVar(&fleet.TenantNamespaces, "soak-tenant-namespaces", 4, "With --soak, namespaces of the second round's tenant kinds (internal/harness/hostile.TenantKinds).")
	flag.IntVar(&fleet.TenantPods, "soak-tenant-pods", 2000, "With --soak, pods in each tenant namespace: four of each kind at the per-scrape limits, the rest keeping all they may.")
	flag.IntVar(&fleet.HangAfterAnswer, "soak-hang-after-answer", 512, "With --soak, pods that answer once and then hang.")
	flag.IntVar(&fleet.Selectors, "soak-selectors", 1024, "With --soak, distinct label selectors asked of the healthy namespace once the fleet is up.")
	flag.Parse()
	if *accept != acceptProtobuf && *accept != acceptJSON {
		return fmt.Errorf("--accept must be %s or %s, got %q", acceptProtobuf, acceptJSON, *accept)
	}
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch *source {
	case "embedded":
	case "promql":
		o := promqlOptions{Metrics: promqlMetricNames(), Requests: *requests, Interval: 5 * time.Second, Reuse: *reuse,
			Accept: *accept, AdapterBinary: *adBin, PABinary: *paBin}
		if set["metrics"] {
			o.Metrics = strings.Split(*metrics, ",")
		}
		if set["scrape-interval"] {
			o.Interval = *interval
		}
		return promqlMain(o, *sizes, *out)
	default:
		return fmt.Errorf("--source must be embedded or promql, got %q", *source)
	}
	// Two samples at least in the TTFT window, and no less than the
	// adapter's default minute.
	ttft := max(time.Minute, 4**interval)
	ns, err := podCounts(*sizes)
	if err != nil {
		return err
	}
	// The pods are served by child processes (podserver.go), which raise
	// their own limit. The adapter, a child too, inherits this one: it
	// keeps a connection to every pod, up to scrape.DefaultMaxIdleConns,
	// besides its clients and informers (fdSlack).
	pods := sum(ns)
	if *soakFor > 0 {
		pods = slices.Max(ns) + fleet.pods()
	}
	if err := raiseFileLimit(min(pods, scrape.DefaultMaxIdleConns) + fdSlack); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	dir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	log.Info("starting the control plane and the adapter", "dir", dir)
	var adapterEnv []string
	if *adEnv != "" {
		adapterEnv = strings.Split(*adEnv, ",")
	}
	// Timing lists tolerates late scrapes; the soak judges freshness at
	// the adapter's default staleness, three intervals.
	staleness := 10 * *interval
	if *soakFor > 0 {
		staleness = 3 * *interval
	}
	cmArgs := splitArgs(*kcmArgs)
	memLimit, err := adapterMemoryLimit(*adMem)
	if err != nil {
		return err
	}
	env, err := devenv.Up(ctx, devenv.Options{Dir: filepath.Join(dir, "env"), Nodes: 1, Logger: log, AdapterEnv: adapterEnv, AdapterBinary: *adBin,
		AdapterMemoryLimit: memLimit,
		HPASyncPeriod:      *hpaSync, ControllerManagerArgs: cmArgs,
		AdapterArgs: append([]string{"--scrape-interval=" + interval.String(), "--max-staleness=" + staleness.String(),
			"--ttft-window=" + ttft.String(),
			// Each size is one namespace, past the default per-namespace cap.
			"--max-targets-per-namespace=" + strconv.Itoa(max(slices.Max(ns), fleet.TenantPods, fleet.HangAfterAnswer, *hpas)),
			// Every HPA's Deployment is in one namespace, past the
			// capacity signal's default bound on a namespace's workloads.
			"--capacity-max-workloads-per-namespace=" + strconv.Itoa(max(capacity.DefaultMaxTargetsPerNamespace, *hpas)),
			"--capacity-max-workloads=" + strconv.Itoa(max(capacity.DefaultMaxTargets, *hpas))}, splitArgs(*adArgs)...)})
	if err != nil {
		return err
	}
	defer env.Down()

	b, err := newBench(env, log, max(*window, ttft), dir)
	if err != nil {
		return err
	}
	defer b.close()
	b.memLimit = memLimit
	b.accept = *accept
	if *gap < 0 {
		return fmt.Errorf("--list-gap must not be negative, got %v", *gap)
	}
	b.gap = *gap
	if *soakFor > 0 {
		rep, err := b.soak(ctx, slices.Max(ns), fleet, *interval, *soakFor, 10*time.Second)
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
	if *hpas > 0 {
		r, err := b.hpas(ctx, *hpas, *hpaSync, *measure)
		if err != nil {
			return fmt.Errorf("%d HPAs: %w", *hpas, err)
		}
		fmt.Println(r.line())
		report := filepath.Join(dir, "hpas.md")
		if err := os.WriteFile(report, []byte(r.markdown()), 0o644); err != nil {
			return err
		}
		fmt.Println("report:", report)
		return nil
	}
	var results []result
	for _, n := range ns {
		rs, err := b.measure(ctx, n, strings.Split(*metrics, ","), *requests)
		if err != nil {
			return fmt.Errorf("%d pods: %w", n, err)
		}
		for _, r := range rs {
			fmt.Println(r.line())
		}
		results = append(results, rs...)
	}
	report := filepath.Join(dir, "report.md")
	if err := os.WriteFile(report, []byte(markdown(results, *interval)), 0o644); err != nil {
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
