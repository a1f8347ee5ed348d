package federation_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/federation"
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
	f.p = federation.New(f.local, backend, f.metrics, nil)
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
