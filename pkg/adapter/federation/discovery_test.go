package federation_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/federation"
)

func discoveryAnswers(b *fakeBackend, versions ...string) {
	var gv []metav1.GroupVersionForDiscovery
	for _, v := range versions {
		gv = append(gv, metav1.GroupVersionForDiscovery{GroupVersion: "custom.metrics.k8s.io/" + v, Version: v})
	}
	// custom-metrics-apiserver lists only its first version here.
	b.set("/apis/custom.metrics.k8s.io", answer{code: 200, body: &metav1.APIGroup{Name: "custom.metrics.k8s.io", Versions: gv[len(gv)-1:], PreferredVersion: gv[len(gv)-1]}})
	res := &metav1.APIResourceList{GroupVersion: "custom.metrics.k8s.io/" + versions[0], APIResources: []metav1.APIResource{
		{Name: "pods/queue_backlog", Namespaced: true, Kind: "MetricValueList"},
		{Name: "deployments.apps/queue_backlog", Namespaced: true, Kind: "MetricValueList"},
		{Name: "jobs.batch/gpu_utilization", Namespaced: true, Kind: "MetricValueList"}, // gpuscale's name
		{Name: "pods/queue_backlog", Namespaced: true, Kind: "MetricValueList"},         // listed twice
	}}
	for _, v := range versions {
		b.set("/apis/custom.metrics.k8s.io/"+v, answer{code: 200, body: res})
	}
	b.set("/apis/external.metrics.k8s.io/v1beta1", answer{code: 200, body: &metav1.APIResourceList{GroupVersion: "external.metrics.k8s.io/v1beta1", APIResources: []metav1.APIResource{
		{Name: "backend_ext", Namespaced: true, Kind: "ExternalMetricValueList"},
		{Name: "inference_queue_depth", Namespaced: true, Kind: "ExternalMetricValueList"}, // gpuscale's name
	}}})
}

func customNames(l []cmprovider.CustomMetricInfo) []string {
	var out []string
	for _, m := range l {
		out = append(out, m.GroupResource.String()+"/"+m.Metric)
	}
	return out
}

func externalNames(l []cmprovider.ExternalMetricInfo) []string {
	var out []string
	for _, m := range l {
		out = append(out, m.Metric)
	}
	return out
}

// TestDiscoveryMerged: the lists hold gpuscale's names, then the
// backend's except those gpuscale serves, once each; discovery is sent as
// the discovery identity.
func TestDiscoveryMerged(t *testing.T) {
	f := newFixture(t, 0)
	discoveryAnswers(f.backend, "v1beta2", "v1beta1")
	if got := customNames(f.p.ListAllMetrics()); !reflect.DeepEqual(got, []string{"pods/gpu_utilization"}) {
		t.Errorf("before discovery: %v, want gpuscale's only", got)
	}
	f.p.Refresh(context.Background())
	if got, want := customNames(f.p.ListAllMetrics()), []string{"pods/gpu_utilization", "pods/queue_backlog", "deployments.apps/queue_backlog"}; !reflect.DeepEqual(got, want) {
		t.Errorf("custom %v, want %v", got, want)
	}
	if got, want := externalNames(f.p.ListAllExternalMetrics()), []string{"inference_queue_depth", "backend_ext"}; !reflect.DeepEqual(got, want) {
		t.Errorf("external %v, want %v", got, want)
	}
	for _, api := range []string{"custom", "external"} {
		if up := f.count(t, "gpuscale_adapter_forward_discovery_up", api); up != 1 {
			t.Errorf("%s discovery_up = %v, want 1", api, up)
		}
	}
	if n := f.count(t, "gpuscale_adapter_forward_discovered_metrics", "custom"); n != 2 {
		t.Errorf("discovered custom = %v, want 2", n)
	}
	discovery := f.backend.requests()
	// The group's document names v1beta1 only, as custom-metrics-apiserver's
	// does; the backend serves v1beta2 too, and that is what is asked.
	_, _ = f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: "ns1", Name: "p"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "queue_backlog"}, labels.Everything())
	if reqs := f.backend.requests(); len(reqs) != len(discovery)+1 || !strings.HasPrefix(reqs[len(reqs)-1].path, "/apis/custom.metrics.k8s.io/v1beta2/") {
		t.Errorf("after discovery, requests %v: want one more, to v1beta2", reqs[len(discovery):])
	}
	for _, r := range discovery {
		if r.header.Get("X-Remote-User") != federation.DiscoveryUser || !slices.Contains(r.header.Values("X-Remote-Group"), user.AllAuthenticated) {
			t.Errorf("discovery %s sent as %q %v", r.path, r.header.Get("X-Remote-User"), r.header.Values("X-Remote-Group"))
		}
	}
}

// TestStaleDiscoveryIsDropped: when discovery fails the backend's names
// leave the lists at once (never served as if confirmed), the failure is
// counted and discovery_up drops to 0, and forwarding still works; the
// names return with the next successful discovery.
func TestStaleDiscoveryIsDropped(t *testing.T) {
	f := newFixture(t, 0)
	discoveryAnswers(f.backend, "v1beta2")
	f.p.Refresh(context.Background())
	if n := len(f.p.ListAllMetrics()); n != 3 {
		t.Fatalf("after discovery: %d custom metrics, want 3", n)
	}
	f.backend.set("/apis/custom.metrics.k8s.io/v1beta2", answer{code: 503, body: status(503, metav1.StatusReasonServiceUnavailable, "down")})
	f.backend.set("/apis/external.metrics.k8s.io/v1beta1", answer{code: 200, body: "not a resource list"})
	f.p.Refresh(context.Background())
	if got := customNames(f.p.ListAllMetrics()); !reflect.DeepEqual(got, []string{"pods/gpu_utilization"}) {
		t.Errorf("custom after a failed discovery: %v, want gpuscale's only", got)
	}
	if got := externalNames(f.p.ListAllExternalMetrics()); !reflect.DeepEqual(got, []string{"inference_queue_depth"}) {
		t.Errorf("external after a failed discovery: %v, want gpuscale's only", got)
	}
	for _, api := range []string{"custom", "external"} {
		if up := f.count(t, "gpuscale_adapter_forward_discovery_up", api); up != 0 {
			t.Errorf("%s discovery_up = %v, want 0", api, up)
		}
		if n := f.count(t, "gpuscale_adapter_forward_discovery_failures_total", api); n != 1 {
			t.Errorf("%s discovery failures = %v, want 1", api, n)
		}
	}
	f.backend.set("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/pods/p/queue_backlog", answer{code: 200, body: v1beta2List(v1beta2Value("Pod", "ns1", "p", "queue_backlog", "1"))})
	if _, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: "ns1", Name: "p"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "queue_backlog"}, labels.Everything()); err != nil {
		t.Errorf("forwarding while discovery fails: %v", err)
	}
	discoveryAnswers(f.backend, "v1beta2")
	f.p.Refresh(context.Background())
	if n := len(f.p.ListAllMetrics()); n != 3 {
		t.Errorf("after recovery: %d custom metrics, want 3", n)
	}
}

// TestBackendWithoutAnAPI: a backend that serves only external metrics
// (KEDA's) is no discovery failure for the custom API.
func TestBackendWithoutAnAPI(t *testing.T) {
	f := newFixture(t, 0)
	discoveryAnswers(f.backend, "v1beta2")
	for _, p := range []string{"/apis/custom.metrics.k8s.io", "/apis/custom.metrics.k8s.io/v1beta2"} {
		f.backend.set(p, answer{code: 404, body: status(404, metav1.StatusReasonNotFound, "not found")})
	}
	f.p.Refresh(context.Background())
	if up := f.count(t, "gpuscale_adapter_forward_discovery_up", "custom"); up != 1 {
		t.Errorf("custom discovery_up = %v, want 1 (nothing to list is no failure)", up)
	}
	if got := customNames(f.p.ListAllMetrics()); len(got) != 1 {
		t.Errorf("custom %v, want gpuscale's only", got)
	}
}

// TestV1beta1Backend: a backend that serves custom metrics in v1beta1 only
// is asked in v1beta1 once discovery says so, and its answer converted.
func TestV1beta1Backend(t *testing.T) {
	f := newFixture(t, 0)
	discoveryAnswers(f.backend, "v1beta1")
	f.p.Refresh(context.Background())
	f.backend.set("/apis/custom.metrics.k8s.io/v1beta1/namespaces/ns1/pods/p/queue_backlog", answer{code: 200, body: &cmv1beta1.MetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: "custom.metrics.k8s.io/v1beta1"},
		Items:    []cmv1beta1.MetricValue{{DescribedObject: corev1.ObjectReference{Kind: "Pod", Name: "p"}, MetricName: "queue_backlog", Value: resource.MustParse("9")}}}})
	v, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: "ns1", Name: "p"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "queue_backlog"}, labels.Everything())
	if err != nil {
		t.Fatal(err)
	}
	if v.Metric.Name != "queue_backlog" || v.Value.String() != "9" {
		t.Errorf("got %s=%s, want queue_backlog=9", v.Metric.Name, v.Value.String())
	}
}
