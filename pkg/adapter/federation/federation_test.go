package federation_test

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	emv1beta1 "k8s.io/metrics/pkg/apis/external_metrics/v1beta1"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// TestForwardedRequests: every request shape reaches the backend at the
// path a client would use, with the selectors, the front-proxy client
// certificate and the caller's identity in X-Remote-* headers, and its
// answer comes back converted.
func TestForwardedRequests(t *testing.T) {
	f := newFixture(t, 0)
	const cm = "/apis/custom.metrics.k8s.io/v1beta2"
	setForwardedAnswers(f.backend)
	sel := labels.SelectorFromSet(labels.Set{"app": "llm"})
	msel := labels.SelectorFromSet(labels.Set{"queue": "hi"})
	pods := schema.GroupResource{Resource: "pods"}
	cases := []struct {
		name, path string
		query      url.Values
		call       func(ctx context.Context) ([]string, error) // values served
		want       []string
	}{
		{"pods by selector", cm + "/namespaces/ns1/pods/*/queue_backlog", url.Values{"labelSelector": {"app=llm"}, "metricLabelSelector": {"queue=hi"}},
			func(ctx context.Context) ([]string, error) {
				l, err := f.p.GetMetricBySelector(ctx, "ns1", sel, cmprovider.CustomMetricInfo{GroupResource: pods, Namespaced: true, Metric: "queue_backlog"}, msel)
				return listValues(l), err
			}, []string{"a=3", "b=500m"}},
		{"deployment by name", cm + "/namespaces/ns1/deployments.apps/llm/queue_backlog", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ns1", Name: "llm"},
					cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: "queue_backlog"}, labels.Everything())
				return valueOf(v), err
			}, []string{"llm=30"}},
		{"root-scoped node", cm + "/nodes/n1/power", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Name: "n1"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "nodes"}, Metric: "power"}, labels.Everything())
				return valueOf(v), err
			}, []string{"n1=250"}},
		{"namespace object", cm + "/namespaces/ns1/metrics/queue_backlog", url.Values{},
			func(ctx context.Context) ([]string, error) {
				v, err := f.p.GetMetricByName(ctx, types.NamespacedName{Name: "ns1"}, cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Resource: "namespaces"}, Metric: "queue_backlog"}, labels.Everything())
				return valueOf(v), err
			}, []string{"ns1=4"}},
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
			}, []string{"backend_ext=42"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := len(f.backend.requests())
			got, err := c.call(asAlice())
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("values %v, want %v", got, c.want)
			}
			reqs := f.backend.requests()[before:]
			if len(reqs) != 1 {
				t.Fatalf("%d backend requests, want 1", len(reqs))
			}
			checkRequest(t, reqs[0], c.path, c.query)
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

// setForwardedAnswers gives the backend an answer for each request shape
// TestForwardedRequests sends.
func setForwardedAnswers(b *fakeBackend) {
	const cm = "/apis/custom.metrics.k8s.io/v1beta2"
	b.set(cm+"/namespaces/ns1/pods/*/queue_backlog", answer{code: 200, body: v1beta2List(
		v1beta2Value("Pod", "ns1", "a", "queue_backlog", "3"), v1beta2Value("Pod", "ns1", "b", "queue_backlog", "500m"))})
	b.set(cm+"/namespaces/ns1/deployments.apps/llm/queue_backlog", answer{code: 200, body: v1beta2List(v1beta2Value("Deployment", "ns1", "llm", "queue_backlog", "30"))})
	b.set(cm+"/nodes/n1/power", answer{code: 200, body: v1beta2List(v1beta2Value("Node", "", "n1", "power", "250"))})
	b.set(cm+"/namespaces/ns1/metrics/queue_backlog", answer{code: 200, body: v1beta2List(v1beta2Value("Namespace", "", "ns1", "queue_backlog", "4"))})
	b.set("/apis/external.metrics.k8s.io/v1beta1/namespaces/ns1/backend_ext", answer{code: 200, body: &emv1beta1.ExternalMetricValueList{
		TypeMeta: metav1.TypeMeta{Kind: "ExternalMetricValueList", APIVersion: "external.metrics.k8s.io/v1beta1"},
		Items:    []emv1beta1.ExternalMetricValue{{MetricName: "backend_ext", MetricLabels: map[string]string{"q": "x"}, Value: resource.MustParse("42")}}}})

}

// checkRequest: the backend got the path and query a client would send,
// over the front-proxy client certificate, on behalf of alice.
func checkRequest(t *testing.T, r seen, path string, query url.Values) {
	t.Helper()
	if r.path != path {
		t.Errorf("path %s, want %s", r.path, path)
	}
	if q, _ := url.ParseQuery(r.query); !reflect.DeepEqual(q, query) {
		t.Errorf("query %v, want %v", q, query)
	}
	checkIdentity(t, r)
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
	f.backend.set(base+"empty", answer{code: 200, raw: []byte{}})
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
		{"empty", "error", apierrors.IsInternalError, 500},
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
