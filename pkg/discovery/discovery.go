// Package discovery turns the pods the adapter's informer sees into scrape
// targets: the GPU exporters (by label selector) and the inference servers
// that ask to be scraped (by annotation).
package discovery

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Annotations an inference pod uses to ask to be scraped. The
// prometheus.io/* family is honoured too, since most charts set it.
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

// Config says how to find exporters.
type Config struct {
	// ExporterSelector matches the exporter DaemonSet's pods.
	ExporterSelector labels.Selector
	ExporterPort     int
	ExporterPath     string
	ExporterScheme   string
}

// Targets returns the scrape targets among pods, and a note per pod that
// asked to be scraped but could not be (a bad port annotation, say), so
// misconfiguration is visible instead of silent.
func Targets(pods []*corev1.Pod, cfg Config) (targets []Target, problems []error) {
	targets = make([]Target, 0, len(pods))
	for _, p := range pods {
		if !scrapable(p) {
			continue
		}
		if cfg.ExporterSelector != nil && !cfg.ExporterSelector.Empty() && cfg.ExporterSelector.Matches(labels.Set(p.Labels)) {
			targets = append(targets, Target{Kind: KindExporter, Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName,
				URL: endpoint(defaultString(cfg.ExporterScheme, "http"), p.Status.PodIP, cfg.ExporterPort, defaultString(cfg.ExporterPath, "/metrics"))})
			continue
		}
		t, ok, err := inferenceTarget(p)
		if err != nil {
			problems = append(problems, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
			continue
		}
		if ok {
			targets = append(targets, t)
		}
	}
	return targets, problems
}

// scrapable: running, addressed and not being deleted. A terminating pod's
// server is draining; its numbers would mislead the autoscaler.
func scrapable(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil
}

func inferenceTarget(p *corev1.Pod) (Target, bool, error) {
	a := p.Annotations
	scrape, portKey, pathKey, schemeKey := a[AnnotationScrape], AnnotationPort, AnnotationPath, AnnotationScheme
	if scrape == "" {
		scrape, portKey, pathKey, schemeKey = a[PrometheusScrape], PrometheusPort, PrometheusPath, PrometheusScheme
	}
	if scrape != "true" {
		return Target{}, false, nil
	}
	port, err := targetPort(p, a[portKey])
	if err != nil {
		return Target{}, false, fmt.Errorf("%s: %w", portKey, err)
	}
	scheme := defaultString(a[schemeKey], "http")
	if scheme != "http" && scheme != "https" {
		return Target{}, false, fmt.Errorf("%s: %q is neither http nor https", schemeKey, scheme)
	}
	path := defaultString(a[pathKey], "/metrics")
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return Target{Kind: KindInference, Namespace: p.Namespace, Pod: p.Name, Node: p.Spec.NodeName,
		URL: endpoint(scheme, p.Status.PodIP, port, path)}, true, nil
}

// targetPort is the annotated port, else the first declared container port.
func targetPort(p *corev1.Pod, annotated string) (int, error) {
	if annotated != "" {
		port, err := strconv.Atoi(annotated)
		if err != nil || port < 1 || port > 65535 {
			return 0, fmt.Errorf("%q is not a port number", annotated)
		}
		return port, nil
	}
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.ContainerPort > 0 {
				return int(cp.ContainerPort), nil
			}
		}
	}
	return 0, fmt.Errorf("no port annotation and no container port declared")
}

func endpoint(scheme, ip string, port int, path string) string {
	return scheme + "://" + net.JoinHostPort(ip, strconv.Itoa(port)) + path
}

func defaultString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
