package federation_test

import (
	"context"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/federation"
)

const backendHost = "backend.metrics.svc"

// localProvider stands for gpuscale's provider: it serves gpu_utilization
// (custom) and inference_queue_depth (external) and says so in its values.
type localProvider struct{ calls int }

func (l *localProvider) GetMetricByName(_ context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValue, error) {
	l.calls++
	return &custom_metrics.MetricValue{DescribedObject: custom_metrics.ObjectReference{Name: name.Name}, Metric: custom_metrics.MetricIdentifier{Name: info.Metric}, Value: resource.MustParse("7")}, nil
}

func (l *localProvider) GetMetricBySelector(_ context.Context, _ string, _ labels.Selector, info cmprovider.CustomMetricInfo, _ labels.Selector) (*custom_metrics.MetricValueList, error) {
	l.calls++
	return &custom_metrics.MetricValueList{Items: []custom_metrics.MetricValue{{Metric: custom_metrics.MetricIdentifier{Name: info.Metric}, Value: resource.MustParse("7")}}}, nil
}

func (l *localProvider) GetExternalMetric(_ context.Context, _ string, _ labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error) {
	l.calls++
	return &external_metrics.ExternalMetricValueList{Items: []external_metrics.ExternalMetricValue{{MetricName: info.Metric, Value: resource.MustParse("7")}}}, nil
}

func (l *localProvider) ListAllMetrics() []cmprovider.CustomMetricInfo {
	return []cmprovider.CustomMetricInfo{{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "gpu_utilization"}}
}

func (l *localProvider) ListAllExternalMetrics() []cmprovider.ExternalMetricInfo {
	return []cmprovider.ExternalMetricInfo{{Metric: "inference_queue_depth"}}
}

var alice = &user.DefaultInfo{Name: "alice", UID: "uid-1", Groups: []string{"devs", user.AllAuthenticated},
	Extra: map[string][]string{"scopes.example.com/team": {"a", "b"}}}

func asAlice() context.Context { return request.WithUser(context.Background(), alice) }

type fixture struct {
	backend *fakeBackend
	local   *localProvider
	metrics *federation.Metrics
	p       *federation.Provider
}

func newFixture(t testing.TB, timeout time.Duration) *fixture {
	t.Helper()
	b, files := newFakeBackend(t, backendHost, "localhost")
	backend, err := federation.NewBackend(federation.BackendConfig{URL: b.url("localhost"), CAFile: files.ca,
		ClientCertFile: files.cert, ClientKeyFile: files.key, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{backend: b, local: &localProvider{}, metrics: federation.NewMetrics()}
	f.p = federation.New(f.local, backend, f.metrics)
	return f
}

func (f *fixture) count(t testing.TB, name string, lv ...string) float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(f.metrics.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i, l := range m.GetLabel() {
				if i >= len(lv) || l.GetValue() != lv[i] {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue()
			case m.Gauge != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func v1beta2List(items ...cmv1beta2.MetricValue) *cmv1beta2.MetricValueList {
	return &cmv1beta2.MetricValueList{TypeMeta: metav1.TypeMeta{Kind: "MetricValueList", APIVersion: "custom.metrics.k8s.io/v1beta2"}, Items: items}
}

func v1beta2Value(kind, ns, name, metric, value string) cmv1beta2.MetricValue {
	return cmv1beta2.MetricValue{DescribedObject: v1ObjectRef(kind, ns, name), Metric: cmv1beta2.MetricIdentifier{Name: metric},
		Timestamp: metav1.NewTime(time.Unix(1700000000, 0)), Value: resource.MustParse(value)}
}

func v1ObjectRef(kind, ns, name string) corev1.ObjectReference {
	return corev1.ObjectReference{Kind: kind, Namespace: ns, Name: name}
}

// TestForwardedRequests: every request shape reaches the backend at the
// path a client would use, with the selectors, the front-proxy client
// certificate and the caller's identity in X-Remote-* headers, and its
// answer comes back converted.
func TestForwardedRequests(t *testing.T) {
	f := newFixture(t, 0)
	const cm = "/apis/custom.metrics.k8s.io/v1beta2"
	f.backend.set(cm+"/namespaces/ns1/pods/*/queue_backlog", answer{code: 200, body: v1beta2List(
		v1beta2Value("Pod", "ns1", "a", "queue_backlog", "3"), v1beta2Value("Pod", "ns1", "b", "queue_backlog", "500m"))})
	f.backend.set(cm+"/namespaces/ns1/deployments.apps/llm/queue_backlog", answer{code: 200, body: v1beta2List(v1beta2Value("Deployment", "ns1", "llm", "queue_backlog", "30"))})
	f.backend.set(cm+"/nodes/n1/power", answer{code: 200, body: v1beta2List(v1beta2Value("Node", "", "n1", "power", "250"))})
	f.backend.set(cm+"/namespaces/ns1/metrics/queue_backlog", answer{code: 200, body: v1beta2List(v1beta2Value("Namespace", "", "ns1", "queue_backlog", "4"))})
	f.backend.set("/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/backend_ext", answer{code: 200, body: &emv1beta1.ExternalMetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: "external.metrics.k8s.io/v1beta1"},
		Items:    []emv1beta1.ExternalMetricValue{{MetricName: "backend_ext", MetricLabels: map[string]string{"q": "x"}, Value: resource.MustParse("42")}}}})

	sel := labels.SelectorFromSet(labels.Set{"app": "llm"})
	msel := labels.SelectorFromSet(labels.Set{"queue": "hi"})
	pods := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name, path string
		query      url.Values
		call       func(ctx context.Context) ([]string, error) // values served
	}{
		{"pods by selector", cm + "/namespaces/ns1/pods/*/queue_backlog", url.Values{"labelSelector": {"app=llm"}, "metricLabelSelector": {"queue=hi"}},
			func(ctx context.Context) ([]string, error) {
				l, err := f.p.GetMetricBySelector(ctx, "ns1", sel, cmprovider.CustomMetricInfo{GroupResource: pods, Namespaced: true, Metric: "queue_backlog"}, msel)
				return listValues(l), err
			}},
		{"deployment by name", cm + "/namespaces/ns1/deployments.apps/llm/queue_backlog", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ns1", Name: "llm"},
					cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: "queue_backlog"}, labels.Everything())
				return valueOf(v), err
			}},
		{"root-scoped node", cm + "/nodes/n1/power", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Name: "n1"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "nodes"}, Metric: "power"}, labels.Everything())
				return valueOf(v), err
			}},
		{"namespace object", cm + "/namespaces/ns1/metrics/queue_backlog", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Name: "ns1"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "namespaces"}, Metric: "queue_backlog"}, labels.Everything())
				return valueOf(v), err
			}},
		{"external", "/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/backend_ext", url.Values{"labelSelector": {"queue=hi"}},
			func(ctx context.Context) ([]string, error) {
				l, err := f.p.GetExternalMetric(ctx, "ns1", msel, cmprovider.ExternalMetricInfo{Metric: "backend_ext"})
				if err != nil {
					return nil, err
				}
				var out []string
				for _, it := range l.Items {
					out = append(out, it.MetricName+"="+it.Value.String())
				}
				return out, nil
			}},
	}
	want := map[string][]string{
		"pods by selector":   {"a=3", "b=500m"},
		"deployment by name": {"llm=30"},
		"root-scoped node":   {"n1=250"},
		"namespace object":   {"ns1=4"},
		"external":           {"backend_ext=42"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.backend.requests())
			got, err := c.call(asAlice())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want[c.name]) {
				t.Errorf("values %v, want %v", got, want[c.name])
			}
			reqs := f.backend.requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("%d backend requests, want 1", len(reqs))
			}
			r := reqs[0]
			if r.path != c.path {
				t.Errorf("path %s, want %s", r.path, c.path)
			}
			if q, _ := url.ParseQuery(r.query); !reflect.DeepEqual(q, c.query) {
				t.Errorf("query %v, want %v", q, c.query)
			}
			checkIdentity(t, r)
		})
	}
	if got := f.count(t, "gpuscale_adapter_forwarded_requests_total", "custom", "ok"); got != 4 {
		t.Errorf("forwarded custom ok = %v, want 4", got)
	}
	if got := f.count(t, "gpuscale_adapter_forwarded_requests_total", "external", "ok"); got != 1 {
		t.Errorf("forwarded external ok = %v, want 1", got)
	}
	if f.local.calls != 0 {
		t.Errorf("the local provider answered %d forwarded requests", f.local.calls)
	}
}

func checkIdentity(t *testing.T, r seen) {
	t.Helper()
	if r.clientCN != "front-proxy-client" {
		t.Errorf("client certificate CN %q, want the front-proxy client's", r.clientCN)
	}
	if got := r.header.Get("X-Remote-User"); got != "alice" {
		t.Errorf("X-Remote-User %q, want alice", got)
	}
	if got := r.header.Get("X-Remote-Uid"); got != "uid-1" {
		t.Errorf("X-Remote-Uid %q, want uid-1", got)
	}
	if got := r.header.Values("X-Remote-Group"); !reflect.DeepEqual(got, []string{"devs", user.AllAuthenticated}) {
		t.Errorf("X-Remote-Group %v, want [devs system:authenticated]", got)
	}
	// The extra key is escaped as the kube-aggregator escapes it.
	if got := r.header.Values("X-Remote-Extra-Scopes.example.com%2fteam"); !reflect.DeepEqual(got, []string{"a", "b"}) {
		t.Errorf("X-Remote-Extra-scopes.example.com%%2fteam = %v, want [a b]; headers %v", got, r.header)
	}
}

func listValues(l *custom_metrics.MetricValueList) []string {
	if l == nil {
		return nil
	}
	var out []string
	for i := range l.Items {
		out = append(out, valueOf(&l.Items[i])...)
	}
	return out
}

func valueOf(v *custom_metrics.MetricValue) []string {
	if v == nil {
		return nil
	}
	return []string{v.DescribedObject.Name + "=" + v.Value.String()}
}

// TestOwnNamesWin: a name gpuscale serves is answered by gpuscale, whatever
// the resource, and never reaches the backend, even when the backend
// serves it too.
func TestOwnNamesWin(t *testing.T) {
	f := newFixture(t, 0)
	f.backend.set("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/jobs.batch/j/gpu_utilization", answer{code: 200, body: v1beta2List(v1beta2Value("Job", "ns1", "j", "gpu_utilization", "99"))})
	ctx := asAlice()
	if _, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ns1", Name: "j"},
		cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "batch", Resource: "jobs"}, Namespaced: true, Metric: "gpu_utilization"}, labels.Everything()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.GetMetricBySelector(ctx, "ns1", labels.Everything(), cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "gpu_utilization"}, labels.Everything()); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.GetExternalMetric(ctx, "ns1", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "inference_queue_depth"}); err != nil {
		t.Fatal(err)
	}
	if f.local.calls != 3 {
		t.Errorf("local provider answered %d of 3", f.local.calls)
	}
	if n := len(f.backend.requests()); n != 0 {
		t.Errorf("backend got %d requests for gpuscale's own names", n)
	}
}

// TestBackendErrorsPassThrough: the backend's status keeps its code, and a
// backend that cannot be reached is a Timeout or ServiceUnavailable naming
// it, never a NotFound; each is counted by result.
func TestBackendErrorsPassThrough(t *testing.T) {
	f := newFixture(t, 300*time.Millisecond)
	const base = "/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/pods/*/"
	f.backend.set(base+"forbidden", answer{code: 403, body: status(403, metav1.StatusReasonForbidden, `user "alice" cannot get`)})
	f.backend.set(base+"unauthorized", answer{code: 401, body: status(401, metav1.StatusReasonUnauthorized, "Unauthorized")})
	f.backend.set(base+"broken", answer{code: 500, body: status(500, metav1.StatusReasonInternalError, "backend broke")})
	f.backend.set(base+"slow", answer{code: 200, body: v1beta2List(), delay: 2 * time.Second})
	f.backend.set(base+"garbage", answer{code: 200, body: map[string]any{"kind": "Pod", "apiVersion": "v1"}})
	cases := []struct {
		metric, result string
		is             func(error) bool
		code           int32
	}{
		{"missing", "not_found", apierrors.IsNotFound, 404},
		{"forbidden", "forbidden", apierrors.IsForbidden, 403},
		{"unauthorized", "unauthorized", apierrors.IsUnauthorized, 401},
		{"broken", "error", apierrors.IsInternalError, 500},
		{"slow", "timeout", apierrors.IsTimeout, 504},
		{"garbage", "error", apierrors.IsInternalError, 500},
	}
	for _, c := range cases {
		t.Run(c.metric, func(t *testing.T) {
			_, err := f.p.GetMetricBySelector(asAlice(), "ns1", labels.Everything(), cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: c.metric}, labels.Everything())
			if !c.is(err) {
				t.Fatalf("err = %v, want %s", err, c.result)
			}
			var st apierrors.APIStatus
			if !asStatus(err, &st) || st.Status().Code != c.code {
				t.Errorf("err %v: want an API status with code %d", err, c.code)
			}
			if got := f.count(t, "gpuscale_adapter_forwarded_requests_total", "custom", c.result); got < 1 {
				t.Errorf("result %s not counted", c.result)
			}
		})
	}
	t.Run("backend down", func(t *testing.T) {
		f.backend.srv.Close()
		_, err := f.p.GetExternalMetric(asAlice(), "ns1", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "anything"})
		if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "localhost") {
			t.Fatalf("err = %v, want ServiceUnavailable naming the backend", err)
		}
		if got := f.count(t, "gpuscale_adapter_forwarded_requests_total", "external", "unavailable"); got != 1 {
			t.Errorf("unavailable counted %v times, want 1", got)
		}
	})
}

func asStatus(err error, st *apierrors.APIStatus) bool {
	s, ok := err.(apierrors.APIStatus)
	*st = s
	return ok
}

// TestOneObjectManyValues: a by-name request answered with other than one
// value is an error, not a pick.
func TestOneObjectManyValues(t *testing.T) {
	f := newFixture(t, 0)
	f.backend.set("/apis/custom.metrics.k8s.io/v1beta2/namespaces/ns1/pods/a/m", answer{code: 200, body: v1beta2List(
		v1beta2Value("Pod", "ns1", "a", "m", "1"), v1beta2Value("Pod", "ns1", "b", "m", "2"))})
	_, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: "ns1", Name: "a"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "pods"}, Namespaced: true, Metric: "m"}, labels.Everything())
	if !apierrors.IsInternalError(err) || !strings.Contains(err.Error(), "2 values") {
		t.Fatalf("err = %v, want an InternalError saying 2 values", err)
	}
}

// TestPathSegmentsAreChecked: a name that would change the backend's path
// once joined is a BadRequest, and nothing is sent.
func TestPathSegmentsAreChecked(t *testing.T) {
	f := newFixture(t, 0)
	pods := schema.GroupResource{Resource: "pods"}
	for _, c := range []struct{ ns, name, metric string }{
		{"ns1", "..", "m"}, {"ns1", "a", ".."}, {"..", "a", "m"}, {"ns1", "a", "x/y"}, {"ns1", ".", "m"},
	} {
		_, err := f.p.GetMetricByName(asAlice(), types.NamespacedName{Namespace: c.ns, Name: c.name}, cmprovider.CustomMetricInfo{GroupResource: pods, Namespaced: true, Metric: c.metric}, labels.Everything())
		if !apierrors.IsBadRequest(err) {
			t.Errorf("%+v: err = %v, want BadRequest", c, err)
		}
	}
	if _, err := f.p.GetExternalMetric(asAlice(), "..", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "m"}); !apierrors.IsBadRequest(err) {
		t.Errorf("external namespace ..: err = %v, want BadRequest", err)
	}
	if n := len(f.backend.requests()); n != 0 {
		t.Errorf("backend got %d requests", n)
	}
}

// TestNoUserIsNotForwarded: without an authenticated user in the context
// nothing is sent.
func TestNoUserIsNotForwarded(t *testing.T) {
	f := newFixture(t, 0)
	_, err := f.p.GetExternalMetric(context.Background(), "ns1", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "x"})
	if err == nil || apierrors.IsNotFound(err) {
		t.Fatalf("err = %v, want an error", err)
	}
	if n := len(f.backend.requests()); n != 0 {
		t.Errorf("backend got %d requests", n)
	}
}

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

// TestTLSIsVerified: the backend's certificate must chain to the CA file
// and name the host of --forward-to.
func TestTLSIsVerified(t *testing.T) {
	b, files := newFakeBackend(t, backendHost)
	_, otherFiles := newFakeBackend(t, backendHost)
	cases := []struct{ name, url, ca string }{
		{"a name the certificate does not hold", b.url("localhost"), files.ca},
		{"a certificate from another CA", b.url("127.0.0.1"), otherFiles.ca},
		{"the system roots", b.url("127.0.0.1"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			backend, err := federation.NewBackend(federation.BackendConfig{URL: c.url, CAFile: c.ca, ClientCertFile: files.cert, ClientKeyFile: files.key})
			if err != nil {
				t.Fatal(err)
			}
			p := federation.New(&localProvider{}, backend, nil)
			_, err = p.GetExternalMetric(asAlice(), "ns1", labels.Everything(), cmprovider.ExternalMetricInfo{Metric: "x"})
			if !apierrors.IsServiceUnavailable(err) || !strings.Contains(err.Error(), "certificate") {
				t.Fatalf("err = %v, want a certificate error", err)
			}
		})
	}
	if n := len(b.requests()); n != 0 {
		t.Errorf("the backend served %d requests over unverified TLS", n)
	}
}

func TestNewBackendRejects(t *testing.T) {
	for _, c := range []federation.BackendConfig{
		{URL: "http://backend.metrics.svc:443"},
		{URL: "https://"},
		{URL: "https://backend.metrics.svc:443/apis"},
		{URL: "https://backend.metrics.svc:443", ClientCertFile: "proxy.crt"},
	} {
		if _, err := federation.NewBackend(c); err == nil {
			t.Errorf("NewBackend(%+v) accepted", c)
		}
	}
}
