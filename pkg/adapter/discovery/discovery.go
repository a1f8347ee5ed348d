// Package discovery turns the pods the adapter's informer sees into scrape
// targets: the GPU exporters (by label selector, in the exporter's namespace
// and controlled by its DaemonSet) and the inference servers, and routers in
// front of them, that ask to be scraped (by annotation; what a pod serves
// tells a router from a server, in pkg/adapter/gather).
//
// Every label and annotation of a pod is written by whoever may create pods
// in its namespace, so none of it is trusted to say what a pod is or where
// to connect: an exporter is known by who controls it, not by its labels,
// and an annotated URL is built only from the pod's own IP, a port number
// and a plain path. See docs/trust-model.md.
package discovery

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery/scrapeurl"
)

// Annotations an inference pod uses to ask to be scraped. The
// prometheus.io/* family is honoured only where Config.PrometheusAnnotations
// asks for it: it is a request to Prometheus, which many charts set on
// every pod, not to the adapter.
const (
	AnnotationScrape = "gpuscale.io/scrape"
	AnnotationPort   = "gpuscale.io/port"
	AnnotationPath   = "gpuscale.io/path"
	AnnotationScheme = "gpuscale.io/scheme"

	PrometheusScrape = "prometheus.io/scrape"
	PrometheusPort   = "prometheus.io/port"
	PrometheusPath   = "prometheus.io/path"
	PrometheusScheme = "prometheus.io/scheme"
)

// Kind says what a target serves.
type Kind uint8

// Target kinds.
const (
	KindExporter Kind = iota
	KindInference
)

func (k Kind) String() string {
	if k == KindExporter {
		return "exporter"
	}
	return "inference"
}

// Target is one endpoint to scrape.
type Target struct {
	Kind      Kind
	Namespace string
	Pod       string
	Node      string
	URL       string
}

// Key is the target's identity, "namespace/pod".
func (t Target) Key() string { return t.Namespace + "/" + t.Pod }

// AnyNamespace as Config.ExporterNamespace trusts exporter pods of the
// DaemonSet in every namespace. It must be asked for by name: an empty
// namespace, the likely result of a templating slip, trusts none.
const AnyNamespace = "*"

// Config says how to find exporters and what to refuse.
type Config struct {
	// ExporterSelector matches the exporter DaemonSet's pods.
	ExporterSelector labels.Selector
	// ExporterNamespace is the namespace the exporter DaemonSet runs in;
	// a pod matching the selector elsewhere is no exporter. AnyNamespace
	// lifts the restriction; empty allows no exporter at all.
	ExporterNamespace string
	// ExporterDaemonSet names the DaemonSet (apps) that must be an exporter
	// pod's controller; empty allows no exporter at all.
	ExporterDaemonSet string
	ExporterPort      int
	ExporterPath      string
	ExporterScheme    string
	// ScrapeHostNetwork lets inference pods on the host network be scraped.
	// Their pod IP is the node's, so their annotations would point the
	// adapter at any port of the node (the kubelet's, say).
	ScrapeHostNetwork bool
	// MaxTargetsPerNamespace caps the inference targets of one namespace;
	// 0: no cap. Over it, the targets first by pod name are kept, so the
	// set does not change from one cycle to the next.
	MaxTargetsPerNamespace int
	// PrometheusAnnotations honours the prometheus.io/* family on pods
	// without gpuscale.io/scrape. Off, those pods are not scraped and
	// not reported: their annotations ask Prometheus, not the adapter.
	PrometheusAnnotations bool
	// PrometheusNamespaces narrows PrometheusAnnotations to the pods of
	// namespaces whose labels match; nil or empty: every namespace.
	// Namespace labels are set by whoever may edit namespaces, usually
	// not a tenant, so they may say where the adapter looks.
	PrometheusNamespaces labels.Selector
	// Namespaces looks up namespace labels; required when
	// PrometheusNamespaces is not empty.
	Namespaces NamespaceGetter
}

// NamespaceGetter gets a namespace by name, as a client-go
// NamespaceLister does from its informer's cache.
type NamespaceGetter interface {
	Get(name string) (*corev1.Namespace, error)
}

// Targets returns the scrape targets among pods, and a note per pod that
// asked to be scraped but could not be (a bad port annotation, say), so
// misconfiguration is visible instead of silent.
func Targets(pods []*corev1.Pod, cfg Config) (targets []Target, problems []error) {
	targets = make([]Target, 0, len(pods))
	selector := cfg.ExporterSelector
	if selector != nil && selector.Empty() {
		selector = nil // an empty selector would make every pod an exporter
	}
	promNS := cfg.prometheusNamespaces()
	for _, p := range pods {
		if !scrapable(p) {
			continue
		}
		if selector != nil && selector.Matches(labels.Set(p.Labels)) {
			err := cfg.exporter(p)
			if err == nil {
				var t Target
				t, err = exporterTarget(p, cfg)
				if err == nil {
					targets = append(targets, t)
					continue
				}
			}
			// A tenant's pod labelled like the exporter is said so; if it
			// also asks to be scraped, it is scraped for itself only.
			problems = append(problems, fmt.Errorf("pod %s/%s: matches the exporter selector but is not scraped as an exporter: %w", p.Namespace, p.Name, err))
		}
		t, ok, err := inferenceTarget(p, cfg, promNS)
		if err != nil {
			problems = append(problems, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		if ok {
			targets = append(targets, t)
		}
	}
	if cfg.MaxTargetsPerNamespace > 0 {
		targets, problems = capNamespaces(targets, problems, cfg.MaxTargetsPerNamespace)
	}
	return targets, problems
}

// scrapable: running, addressed and not being deleted. A terminating pod's
// server is draining; its numbers would mislead the autoscaler.
func scrapable(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

// exporter says why a pod matching the exporter selector may not speak for
// its node's GPUs, nil if it may. Labels are the pod author's to choose;
// the namespace and the controller are not, short of rights in the
// exporter's namespace.
func (cfg Config) exporter(p *corev1.Pod) error {
	if cfg.ExporterNamespace == "" || cfg.ExporterDaemonSet == "" {
		return errors.New("no exporter namespace and DaemonSet configured")
	}
	if cfg.ExporterNamespace != AnyNamespace && p.Namespace != cfg.ExporterNamespace {
		return fmt.Errorf("exporters run in namespace %s", cfg.ExporterNamespace)
	}
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "DaemonSet" || ref.Name != cfg.ExporterDaemonSet {
		return fmt.Errorf("not controlled by the DaemonSet %s", cfg.ExporterDaemonSet)
	}
	if gv, err := schema.ParseGroupVersion(ref.APIVersion); err != nil || gv.Group != "apps" {
		return fmt.Errorf("controller %s/%s is not an apps DaemonSet", ref.APIVersion, ref.Name)
	}
	return nil
}

func exporterTarget(p *corev1.Pod, cfg Config) (Target, error) {
	u, err := scrapeurl.URL(defaultString(cfg.ExporterScheme, "http"), p.Status.PodIP, cfg.ExporterPort, defaultString(cfg.ExporterPath, "/metrics"))
	if err != nil {
		return Target{}, err
	}
	return Target{Kind: KindExporter, Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName, URL: u}, nil
}

func inferenceTarget(p *corev1.Pod, cfg Config, promNS func(string) (bool, error)) (Target, bool, error) {
	a := p.Annotations
	scrape, portKey, pathKey, schemeKey := a[AnnotationScrape], AnnotationPort, AnnotationPath, AnnotationScheme
	if scrape == "" && cfg.PrometheusAnnotations {
		scrape, portKey, pathKey, schemeKey = a[PrometheusScrape], PrometheusPort, PrometheusPath, PrometheusScheme
	}
	if scrape != "true" {
		return Target{}, false, nil
	}
	if portKey == PrometheusPort {
		if ok, err := promNS(p.Namespace); err != nil || !ok {
			return Target{}, false, err
		}
	}
	if p.Spec.HostNetwork && !cfg.ScrapeHostNetwork {
		return Target{}, false, errors.New("on the host network, whose ports are the node's: not scraped (--scrape-host-network allows it)")
	}
	var ports []int32
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			ports = append(ports, cp.ContainerPort)
		}
	}
	u, err := scrapeurl.Build(a[portKey], a[pathKey], a[schemeKey], p.Status.PodIP, ports)
	var fe *scrapeurl.FieldError
	if errors.As(err, &fe) {
		key := map[scrapeurl.Field]string{scrapeurl.FieldPort: portKey, scrapeurl.FieldPath: pathKey, scrapeurl.FieldScheme: schemeKey}[fe.Field]
		return Target{}, false, fmt.Errorf("%s: %w", key, fe.Err)
	}
	if err != nil {
		return Target{}, false, err
	}
	return Target{Kind: KindInference, Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName, URL: u}, true, nil
}

// prometheusNamespaces returns whether prometheus.io/* annotations count
// in a namespace, looking each namespace up once per call of Targets. A
// namespace the cache does not hold (yet) does not match: the next cycle
// sees it.
func (cfg Config) prometheusNamespaces() func(ns string) (bool, error) {
	sel := cfg.PrometheusNamespaces
	if sel == nil || sel.Empty() {
		return func(string) (bool, error) { return true, nil }
	}
	if cfg.Namespaces == nil {
		err := errors.New("prometheus.io annotations: a namespace selector but no namespace lister configured")
		return func(string) (bool, error) { return false, err }
	}
	seen := map[string]bool{}
	return func(name string) (bool, error) {
		if ok, done := seen[name]; done {
			return ok, nil
		}
		ns, err := cfg.Namespaces.Get(name)
		switch {
		case apierrors.IsNotFound(err):
			ns = nil
		case err != nil:
			return false, fmt.Errorf("prometheus.io annotations: namespace %s: %w", name, err)
		}
		ok := ns != nil && sel.Matches(labels.Set(ns.Labels))
		seen[name] = ok
		return ok, nil
	}
}

// CheckPath accepts an absolute URL path that cannot make a scrape URL
// point elsewhere (scrapeurl.CheckPath).
func CheckPath(path string) error { return scrapeurl.CheckPath(path) }

// capNamespaces keeps at most limit inference targets of each namespace,
// those first by pod name, and says which namespaces lost some. Exporters
// are not counted: one per node, in the exporter's namespace.
func capNamespaces(targets []Target, problems []error, limit int) ([]Target, []error) {
	perNS := map[string]int{}
	for _, t := range targets {
		if t.Kind == KindInference {
			perNS[t.Namespace]++
		}
	}
	over := map[string]bool{}
	for ns, n := range perNS {
		if n > limit {
			over[ns] = true
		}
	}
	if len(over) == 0 {
		return targets, problems
	}
	kept, capped := targets[:0], []Target(nil)
	for _, t := range targets {
		if t.Kind == KindInference && over[t.Namespace] {
			capped = append(capped, t)
		} else {
			kept = append(kept, t)
		}
	}
	// The informer lists in no particular order; by name, the same pods
	// are kept every cycle.
	slices.SortFunc(capped, func(a, b Target) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod))
	})
	for i, t := range capped {
		if i == 0 || t.Namespace != capped[i-1].Namespace {
			kept = append(kept, capped[i:i+limit]...)
		}
	}
	namespaces := slices.Sorted(maps.Keys(over))
	for _, ns := range namespaces {
		problems = append(problems, fmt.Errorf("namespace %s: %d pods ask to be scraped, more than the %d allowed per namespace: the last %d by name are not scraped",
			ns, perNS[ns], limit, perNS[ns]-limit))
	}
	return kept, problems
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
