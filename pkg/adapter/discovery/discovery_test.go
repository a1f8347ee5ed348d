package discovery

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery/scrapeurl"
)

func pod(name string, lbl, ann map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: lbl, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

// exporterLabels are what the exporter selector of these tests matches.
var exporterLabels = map[string]string{"app.kubernetes.io/name": "gpuscale-exporter"}

func testConfig() Config {
	return Config{ExporterSelector: labels.SelectorFromSet(exporterLabels), ExporterNamespace: "ns",
		ExporterDaemonSet: "gpuscale-exporter", ExporterPort: 9400}
}

// controlledBy makes p a pod of the named controller, as the DaemonSet
// controller (or another) writes it.
func controlledBy(apiVersion, kind, name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: name, UID: "u-1", Controller: ptr.To(true)}}
	}
}

var ownedByExporter = controlledBy("apps/v1", "DaemonSet", "gpuscale-exporter")

func TestTargets(t *testing.T) {
	cfg := testConfig()
	now := metav1.NewTime(time.Now())
	cases := []struct {
		name    string
		pod     *corev1.Pod
		want    string // URL, "" for no target
		kind    Kind
		problem string
	}{
		{"exporter by selector", pod("exp", exporterLabels, nil, ownedByExporter), "http://10.0.0.7:9400/metrics", KindExporter, ""},
		{"exporter on the host network", pod("exp", exporterLabels, nil, ownedByExporter, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			"http://10.0.0.7:9400/metrics", KindExporter, ""},
		{"gpuscale annotations", pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "8000", AnnotationPath: "stats", AnnotationScheme: "https"}),
			"https://10.0.0.7:8000/stats", KindInference, ""},
		{"prometheus annotations are not asked for", pod("b", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "9000"}), "", 0, ""},
		{"gpuscale wins over prometheus", pod("c", nil, map[string]string{AnnotationScrape: "true", PrometheusScrape: "true", PrometheusPort: "9000"}),
			"http://10.0.0.7:8080/metrics", KindInference, ""},
		{"container port fallback", pod("d", nil, map[string]string{AnnotationScrape: "true"}), "http://10.0.0.7:8080/metrics", KindInference, ""},
		{"not annotated", pod("e", nil, nil), "", 0, ""},
		{"scrape false", pod("f", nil, map[string]string{AnnotationScrape: "false"}), "", 0, ""},
		{"pending", pod("g", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), "", 0, ""},
		{"no IP", pod("h", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.PodIP = "" }), "", 0, ""},
		{"terminating", pod("i", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.DeletionTimestamp = &now }), "", 0, ""},
		{"bad port", pod("j", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "http"}), "", 0, "not a port number"},
		{"bad scheme", pod("k", nil, map[string]string{AnnotationScrape: "true", AnnotationScheme: "ftp"}), "", 0, "neither http nor https"},
		{"no port at all", pod("l", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }), "", 0, "no container port"},
		{"container port out of range", pod("l2", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 70000 }),
			"", 0, "no container port"},
		{"host network", pod("hn", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			"", 0, "on the host network"},
		{"host network, prometheus annotations not asked for", pod("hn2", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "10250"}, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
			"", 0, ""},
		{"host network, not annotated", pod("hn3", nil, nil, func(p *corev1.Pod) { p.Spec.HostNetwork = true }), "", 0, ""},
		{"pod IP not an IP", pod("ip", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.PodIP = "evil.example.com" }),
			"", 0, "not an IP address"},
		{"IPv6", pod("m", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }), "http://[fd00::7]:8080/metrics", KindInference, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Targets([]*corev1.Pod{tc.pod}, cfg)
			if tc.problem != "" {
				if len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.problem) || !strings.Contains(problems[0].Error(), "ns/"+tc.pod.Name) {
					t.Fatalf("problems = %v, want one naming the pod and %q", problems, tc.problem)
				}
				return
			}
			if len(problems) != 0 {
				t.Fatalf("unexpected problems: %v", problems)
			}
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("targets = %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].URL != tc.want || got[0].Kind != tc.kind || got[0].Node != "n1" || got[0].Key() != "ns/"+tc.pod.Name {
				t.Fatalf("targets = %+v, want %s (%v)", got, tc.want, tc.kind)
			}
		})
	}
}

// namespaceLister serves namespaces from a map, as an informer's lister
// does from its cache; err, if set, is every lookup's answer.
type namespaceLister struct {
	labels map[string]map[string]string
	err    error
	gets   int
}

func (l *namespaceLister) Get(name string) (*corev1.Namespace, error) {
	l.gets++
	if l.err != nil {
		return nil, l.err
	}
	lbl, ok := l.labels[name]
	if !ok {
		return nil, apierrors.NewNotFound(corev1.Resource("namespaces"), name)
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbl}}, nil
}

// TestPrometheusAnnotations: the prometheus.io/* family is honoured only
// when asked for, then only in the namespaces the selector matches, and
// never over gpuscale.io/scrape.
func TestPrometheusAnnotations(t *testing.T) {
	prom := map[string]string{PrometheusScrape: "true", PrometheusPort: "9000", PrometheusPath: "/stats"}
	inNS := func(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }
	lister := &namespaceLister{labels: map[string]map[string]string{
		"serving": {"gpuscale.io/prometheus-annotations": "true"},
		"other":   {"team": "web"},
	}}
	optedIn := labels.SelectorFromSet(labels.Set{"gpuscale.io/prometheus-annotations": "true"})
	cases := []struct {
		name     string
		on       bool
		selector labels.Selector
		lister   NamespaceGetter
		pod      *corev1.Pod
		want     string // URL, "" for no target
		problem  string
	}{
		{name: "off by default", pod: pod("a", nil, prom, inNS("serving"))},
		{name: "on, every namespace", on: true, pod: pod("a", nil, prom, inNS("other")), want: "http://10.0.0.7:9000/stats"},
		{name: "on, empty selector is every namespace", on: true, selector: labels.Everything(), pod: pod("a", nil, prom, inNS("other")), want: "http://10.0.0.7:9000/stats"},
		{name: "on, namespace matches", on: true, selector: optedIn, lister: lister, pod: pod("a", nil, prom, inNS("serving")), want: "http://10.0.0.7:9000/stats"},
		{name: "on, namespace does not match", on: true, selector: optedIn, lister: lister, pod: pod("a", nil, prom, inNS("other"))},
		{name: "on, namespace not in the cache", on: true, selector: optedIn, lister: lister, pod: pod("a", nil, prom, inNS("new"))},
		{name: "on, namespace lookup fails", on: true, selector: optedIn, lister: &namespaceLister{err: errors.New("cache broken")},
			pod: pod("a", nil, prom, inNS("serving")), problem: "cache broken"},
		{name: "on, selector without a lister", on: true, selector: optedIn, pod: pod("a", nil, prom, inNS("serving")), problem: "no namespace lister"},
		{name: "on, bad prometheus.io/port is reported", on: true, pod: pod("a", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "x"}), problem: PrometheusPort},
		{name: "off, bad prometheus.io/port is not reported", pod: pod("a", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "x"})},
		{name: "off, gpuscale.io annotations still count", pod: pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "8000"}, inNS("other")),
			want: "http://10.0.0.7:8000/metrics"},
		{name: "selector does not narrow gpuscale.io annotations", on: true, selector: optedIn, lister: lister,
			pod: pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "8000"}, inNS("other")), want: "http://10.0.0.7:8000/metrics"},
		{name: "gpuscale.io/scrape=false wins", on: true, pod: pod("a", nil, map[string]string{AnnotationScrape: "false", PrometheusScrape: "true"})},
		{name: "on, host network still refused", on: true, pod: pod("a", nil, prom, func(p *corev1.Pod) { p.Spec.HostNetwork = true }), problem: "on the host network"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.PrometheusAnnotations, cfg.PrometheusNamespaces, cfg.Namespaces = tc.on, tc.selector, tc.lister
			got, problems := Targets([]*corev1.Pod{tc.pod}, cfg)
			switch {
			case tc.problem != "":
				if len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.problem) {
					t.Fatalf("problems = %v, want one saying %q", problems, tc.problem)
				}
			case len(problems) != 0:
				t.Fatalf("unexpected problems: %v", problems)
			}
			var urls []string
			for _, tg := range got {
				urls = append(urls, tg.URL)
			}
			if want := slices.DeleteFunc([]string{tc.want}, func(s string) bool { return s == "" }); !slices.Equal(urls, want) {
				t.Fatalf("targets %v, want %v", urls, want)
			}
		})
	}
}

// TestPrometheusNamespacesLookedUpOnce: a namespace's labels are read once
// per discovery, not once per pod.
func TestPrometheusNamespacesLookedUpOnce(t *testing.T) {
	lister := &namespaceLister{labels: map[string]map[string]string{"serving": {"scrape": "yes"}}}
	cfg := testConfig()
	cfg.PrometheusAnnotations, cfg.Namespaces = true, lister
	cfg.PrometheusNamespaces = labels.SelectorFromSet(labels.Set{"scrape": "yes"})
	var pods []*corev1.Pod
	for i := range 50 {
		pods = append(pods, pod(fmt.Sprintf("p%d", i), nil, map[string]string{PrometheusScrape: "true"}, func(p *corev1.Pod) { p.Namespace = "serving" }))
	}
	got, problems := Targets(pods, cfg)
	if len(got) != 50 || len(problems) != 0 || lister.gets != 1 {
		t.Fatalf("%d targets, problems %v, %d namespace lookups; want 50, none, 1", len(got), problems, lister.gets)
	}
}

// TestExporterTrust: only pods of the exporter DaemonSet in its namespace
// are scraped as exporters; a tenant's pod wearing the exporter's labels is
// reported, and scraped for itself if it asks to be.
func TestExporterTrust(t *testing.T) {
	inNS := func(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }
	annotated := map[string]string{AnnotationScrape: "true"}
	cases := []struct {
		name    string
		cfg     func(*Config)
		pod     *corev1.Pod
		kind    Kind   // of the one target, when want is set
		want    string // URL, "" for no target
		problem string
	}{
		{"genuine", nil, pod("exp", exporterLabels, nil, ownedByExporter), KindExporter, "http://10.0.0.7:9400/metrics", ""},
		{"other namespace", nil, pod("exp", exporterLabels, nil, ownedByExporter, inNS("tenant")), 0, "", "exporters run in namespace ns"},
		{"other namespace, annotated: scraped for itself", nil, pod("exp", exporterLabels, annotated, ownedByExporter, inNS("tenant")),
			KindInference, "http://10.0.0.7:8080/metrics", "exporters run in namespace ns"},
		{"no controller", nil, pod("exp", exporterLabels, nil), 0, "", "not controlled by the DaemonSet gpuscale-exporter"},
		{"owner but not controller", nil, pod("exp", exporterLabels, nil, ownedByExporter, func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }),
			0, "", "not controlled by the DaemonSet gpuscale-exporter"},
		{"another DaemonSet", nil, pod("exp", exporterLabels, nil, controlledBy("apps/v1", "DaemonSet", "imposter")), 0, "", "not controlled by the DaemonSet"},
		{"a ReplicaSet of that name", nil, pod("exp", exporterLabels, nil, controlledBy("apps/v1", "ReplicaSet", "gpuscale-exporter")), 0, "", "not controlled by the DaemonSet"},
		{"a custom DaemonSet kind", nil, pod("exp", exporterLabels, nil, controlledBy("example.com/v1", "DaemonSet", "gpuscale-exporter")), 0, "", "is not an apps DaemonSet"},
		{"any namespace, explicitly", func(c *Config) { c.ExporterNamespace = AnyNamespace }, pod("exp", exporterLabels, nil, ownedByExporter, inNS("gpu-operator")),
			KindExporter, "http://10.0.0.7:9400/metrics", ""},
		{"no namespace configured", func(c *Config) { c.ExporterNamespace = "" }, pod("exp", exporterLabels, nil, ownedByExporter), 0, "", "no exporter namespace and DaemonSet configured"},
		{"no DaemonSet configured", func(c *Config) { c.ExporterDaemonSet = "" }, pod("exp", exporterLabels, nil, ownedByExporter), 0, "", "no exporter namespace and DaemonSet configured"},
		{"empty selector matches nothing", func(c *Config) { c.ExporterSelector = labels.Everything() }, pod("exp", nil, nil, ownedByExporter), 0, "", ""},
		{"not labelled", nil, pod("exp", nil, nil, ownedByExporter), 0, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			if tc.cfg != nil {
				tc.cfg(&cfg)
			}
			got, problems := Targets([]*corev1.Pod{tc.pod}, cfg)
			if tc.problem == "" && len(problems) != 0 {
				t.Fatalf("unexpected problems: %v", problems)
			}
			if tc.problem != "" && (len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.problem) ||
				!strings.Contains(problems[0].Error(), tc.pod.Namespace+"/"+tc.pod.Name)) {
				t.Fatalf("problems = %v, want one naming the pod and %q", problems, tc.problem)
			}
			switch {
			case tc.want == "" && len(got) != 0:
				t.Fatalf("targets = %+v, want none", got)
			case tc.want != "" && (len(got) != 1 || got[0].URL != tc.want || got[0].Kind != tc.kind || got[0].Node != "n1"):
				t.Fatalf("targets = %+v, want one %v at %s", got, tc.kind, tc.want)
			}
		})
	}
}

func TestHostNetworkAllowed(t *testing.T) {
	cfg := testConfig()
	cfg.ScrapeHostNetwork = true
	p := pod("hn", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	got, problems := Targets([]*corev1.Pod{p}, cfg)
	if len(problems) != 0 || len(got) != 1 || got[0].URL != "http://10.0.0.7:8080/metrics" {
		t.Fatalf("with ScrapeHostNetwork: targets %+v, problems %v", got, problems)
	}
}

// TestPathSmuggling: an annotated path cannot add a user, a host, a query
// or a fragment to the URL, nor break the request line.
func TestPathSmuggling(t *testing.T) {
	cases := []struct {
		path, want string // want: the URL, "" for a problem
	}{
		{"/metrics", "http://10.0.0.7:8080/metrics"},
		{"stats", "http://10.0.0.7:8080/stats"},
		{"/a/b-c_d.e~f/%7Eg:h;i=j,k+l", "http://10.0.0.7:8080/a/b-c_d.e~f/%7Eg:h;i=j,k+l"},
		{"@evil/", ""},
		{"@evil.example.com:80/metrics", ""},
		{"//evil.example.com/metrics", ""},
		{"//", ""},
		{"/metrics?target=http://169.254.169.254/", ""},
		{"/metrics#x", ""},
		{"/metrics HTTP/1.1\r\nHost: evil", ""},
		{"/metrics\nX: y", ""},
		{"/metrics\x00", ""},
		{"/met rics", ""},
		{"\\\\evil\\metrics", ""},
		{"/%zz", ""},
		{"/%4", ""},
		{"/\u00e9", ""},
		{"/" + strings.Repeat("a", scrapeurl.MaxPathLen), ""},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			p := pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPath: tc.path})
			got, problems := Targets([]*corev1.Pod{p}, testConfig())
			if tc.want == "" {
				if len(got) != 0 || len(problems) != 1 || !strings.Contains(problems[0].Error(), AnnotationPath) {
					t.Fatalf("path %q: targets %+v, problems %v; want refused with a problem", tc.path, got, problems)
				}
				return
			}
			if len(problems) != 0 || len(got) != 1 || got[0].URL != tc.want {
				t.Fatalf("path %q: targets %+v, problems %v; want %s", tc.path, got, problems, tc.want)
			}
		})
	}
}

// TestNamespaceCap: over the per-namespace cap, the same pods (first by
// name) are kept whatever order the informer lists them in, the namespace
// is reported, other namespaces and exporters are untouched.
func TestNamespaceCap(t *testing.T) {
	var pods []*corev1.Pod
	for i := range 7 {
		pods = append(pods, pod(fmt.Sprintf("big-%d", i), nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Namespace = "big" }))
	}
	for i := range 3 {
		pods = append(pods, pod(fmt.Sprintf("small-%d", i), nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Namespace = "small" }))
	}
	for i := range 4 {
		pods = append(pods, pod(fmt.Sprintf("exp-%d", i), exporterLabels, nil, ownedByExporter))
	}
	cfg := testConfig()
	cfg.MaxTargetsPerNamespace = 3
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 5 {
		rng.Shuffle(len(pods), func(i, j int) { pods[i], pods[j] = pods[j], pods[i] })
		got, problems := Targets(slices.Clone(pods), cfg)
		var keys []string
		for _, t := range got {
			keys = append(keys, t.Key())
		}
		slices.Sort(keys)
		want := []string{"big/big-0", "big/big-1", "big/big-2", "ns/exp-0", "ns/exp-1", "ns/exp-2", "ns/exp-3", "small/small-0", "small/small-1", "small/small-2"}
		if !slices.Equal(keys, want) {
			t.Fatalf("round %d: targets %v, want %v", round, keys, want)
		}
		if len(problems) != 1 || !strings.Contains(problems[0].Error(), "namespace big: 7 pods ask to be scraped, more than the 3 allowed") {
			t.Fatalf("round %d: problems %v, want one for namespace big", round, problems)
		}
	}
	cfg.MaxTargetsPerNamespace = 0
	if got, problems := Targets(pods, cfg); len(got) != len(pods) || len(problems) != 0 {
		t.Fatalf("no cap: %d targets, problems %v; want %d", len(got), problems, len(pods))
	}
}
