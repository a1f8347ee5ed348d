package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/adapter/federation"
)

// federationArgs are the suite adapter's flags plus federation with the
// test adapter, which it reaches as the aggregator reaches an APIService:
// verified TLS and a front-proxy client certificate.
func federationArgs(t *testing.T, ta *testAdapter) []string {
	t.Helper()
	certPEM, keyPEM, err := env.Cluster.FrontProxyClientCert()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	return []string{"--scrape-interval=" + scrapeInterval.String(), "--max-staleness=" + maxStaleness.String(),
		"--ttft-window=" + ttftWindow.String(), "--v=2",
		"--forward-to=" + ta.url, "--forward-ca-file=" + ta.caFile,
		"--forward-client-cert-file=" + writeTestFile(t, dir, "proxy.crt", certPEM),
		"--forward-client-key-file=" + writeTestFile(t, dir, "proxy.key", keyPEM),
		"--forward-discovery-interval=2s", "--forward-timeout=5s"}
}

// TestFederation runs gpuscale with --forward-to a second real metrics
// adapter (custom-metrics-apiserver's test adapter): the aggregator's one
// custom.metrics.k8s.io APIService serves both, discovery lists both, an
// HPA on the test adapter's metric and an HPA on a gpuscale signal both
// scale in one cluster, its external metric is served through gpuscale's
// external APIService, the test adapter sees (in its audit log) the
// original callers, never gpuscale, and NotFound stays NotFound.
func TestFederation(t *testing.T) {
	needEnv(t)
	ta := startTestAdapter(t)
	useAdapter(t, federationArgs(t, ta))
	ns := namespace(t, "e2e-federation")

	t.Run("discovery merged", checkMergedDiscovery)

	// Both HPAs run at once.
	deployment(t, ns, "llm", 1)
	ta.setObjectMetric(t, ns, "deployments.apps", "llm", "backend_queue", "30")
	target := resource.MustParse("10")
	hpa(t, ns, "llm", 1, 4, autoscalingv2.MetricSpec{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
		DescribedObject: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "llm"},
		Metric:          autoscalingv2.MetricIdentifier{Name: "backend_queue"},
		Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &target},
	}})
	own := deployment(t, ns, "queue", 1)
	hpa(t, ns, "queue", 1, 4, podsMetric("inference_queue_depth", "5"))
	env.World.SetRate(ns, own, 45) // about three replicas' capacity

	t.Run("HPA on the test adapter's metric", func(t *testing.T) {
		// 30 against a target of 10 from one replica: 3 desired.
		testenv.WaitFor(t, 60*time.Second, "the forwarded-metric HPA to want 3 replicas from backend_queue=30", func(ctx context.Context) (bool, error) {
			h, err := env.Cluster.Client().AutoscalingV2().HorizontalPodAutoscalers(ns).Get(ctx, "llm", metav1.GetOptions{})
			return err == nil && h.Status.DesiredReplicas == 3 && len(h.Status.CurrentMetrics) == 1 &&
				h.Status.CurrentMetrics[0].Object != nil && h.Status.CurrentMetrics[0].Object.Current.Value.Value() == 30, nil
		})
	})
	t.Run("HPA on a gpuscale signal", func(t *testing.T) {
		testenv.WaitFor(t, 60*time.Second, "the inference_queue_depth HPA to want more than 1 replica", func(ctx context.Context) (bool, error) {
			d, _ := replicas(ctx, ns, "queue")
			return d > 1, nil
		})
		env.World.SetRate(ns, own, 0)
	})

	reader := metricsReader(t)
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/llm/backend_queue"
	t.Run("caller identity reaches the backend", func(t *testing.T) { checkCallerIdentity(t, ta, reader, path) })
	t.Run("external metric forwarded", func(t *testing.T) { checkExternalForwarded(t, reader, ns) })
	t.Run("NotFound stays NotFound", func(t *testing.T) {
		_, err := customListAs(context.Background(), reader.client, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/"+ns+"/deployments.apps/llm/no_such_metric")
		if !apierrors.IsNotFound(err) {
			t.Fatalf("a metric neither adapter has: err = %v, want NotFound", err)
		}
	})
	t.Run("forwarded requests counted", checkForwardCounted)
	t.Run("forwarded latency", func(t *testing.T) { forwardedLatency(t, ta, reader, ns) })
}

func checkMergedDiscovery(t *testing.T) {
	testenv.WaitFor(t, 30*time.Second, "both adapters' names in the custom and external discovery", func(ctx context.Context) (bool, error) {
		custom, err1 := resourceNames(ctx, "/apis/custom.metrics.k8s.io/v1beta2")
		external, err2 := resourceNames(ctx, "/apis/external.metrics.k8s.io/v1beta1")
		// The test adapter lists the placeholders of
		// custom-metrics-apiserver's default providers.
		return err1 == nil && err2 == nil &&
			slices.Contains(custom, "pods/inference_queue_depth") && slices.Contains(custom, "/custommetrics") &&
			slices.Contains(external, "inference_queue_depth") && slices.Contains(external, "externalmetrics"), nil
	})
}

// checkCallerIdentity: the reader's read of the forwarded metric reaches
// the test adapter as the reader, with its group; the HPA controller's as
// the HPA controller; discovery as gpuscale's discovery identity; nothing
// as gpuscale's own ServiceAccount.
func checkCallerIdentity(t *testing.T, ta *testAdapter, reader reader, path string) {
	ctx := context.Background()
	l, err := customListAs(ctx, reader.client, path)
	if err != nil || len(l.Items) != 1 || l.Items[0].Value.Value() != 30 {
		t.Fatalf("forwarded metric as %s: %v, %v; want backend_queue=30", reader.user, l, err)
	}
	// The audit event is written once the response is sent: it may land a
	// moment after the client has the answer.
	users := map[string]bool{}
	var readers []auditEvent
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		clear(users)
		readers = readers[:0]
		for _, e := range ta.auditEvents(t) {
			users[e.User.Username] = true
			if e.User.Username == reader.user {
				readers = append(readers, e)
			}
		}
		return slices.ContainsFunc(readers, func(e auditEvent) bool {
			return e.RequestURI == path && slices.Contains(e.User.Groups, reader.group) && e.ResponseStatus.Code == 200
		}), nil
	})
	if err != nil {
		t.Fatalf("the test adapter's audit log has no answered request of %s as %s in group %s; its events as %s: %+v", path, reader.user, reader.group, reader.user, readers)
	}
	t.Logf("the test adapter served requests for %v", keys(users))
	if !slices.ContainsFunc(keys(users), func(u string) bool { return strings.HasSuffix(u, ":horizontal-pod-autoscaler") }) {
		t.Errorf("no request as the HPA controller in the test adapter's audit log: %v", keys(users))
	}
	if !users[federation.DiscoveryUser] {
		t.Errorf("no discovery as %s in the test adapter's audit log", federation.DiscoveryUser)
	}
	for u := range users {
		if strings.Contains(u, "gpuscale-adapter") && u != federation.DiscoveryUser {
			t.Errorf("the backend served a request as gpuscale's own identity %q, not the caller's", u)
		}
	}
}

// checkExternalForwarded: the test adapter's fixed external metric
// (my-external-metric: 42 for foo=bar, 43 for foo=baz) is served through
// gpuscale's external APIService, its label selector passed on.
func checkExternalForwarded(t *testing.T, reader reader, ns string) {
	b, err := reader.client.Get().AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces/"+ns+"/my-external-metric").
		Param("labelSelector", "foo=bar").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var l metricList
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Value.Value() != 42 {
		t.Fatalf("my-external-metric{foo=bar} through gpuscale: %s; want one value, 42", b)
	}
}

func checkForwardCounted(t *testing.T) {
	metrics := adapterMetrics(t)
	for _, want := range []string{`gpuscale_adapter_forwarded_requests_total{api="custom",result="ok"}`,
		`gpuscale_adapter_forwarded_requests_total{api="custom",result="not_found"}`,
		`gpuscale_adapter_forwarded_requests_total{api="external",result="ok"}`,
		`gpuscale_adapter_forward_discovery_up{api="custom"} 1`, `gpuscale_adapter_forward_discovery_up{api="external"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("adapter /metrics lacks %s", want)
		}
	}
}

// adapterMetrics reads the adapter's own /metrics (as cluster-admin,
// directly: the aggregator proxies only API groups), on the environment's
// adapter port.
func adapterMetrics(t *testing.T) string {
	t.Helper()
	b, err := env.AdapterGet(context.Background(), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// reader is a user allowed to read every custom and external metric, and
// nothing else.
type reader struct {
	user, group string
	client      rest.Interface
	config      *rest.Config
}

func metricsReader(t *testing.T) reader {
	t.Helper()
	ctx := context.Background()
	r := reader{user: "federation-reader", group: "federation-readers"}
	rbac := env.Cluster.Client().RbacV1()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-federation-reader"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"custom.metrics.k8s.io", "external.metrics.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-federation-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: r.user}}}
	if _, err := rbac.ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = rbac.ClusterRoleBindings().Delete(context.Background(), binding.Name, metav1.DeleteOptions{})
		_ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{})
	})
	path, err := env.Cluster.Kubeconfig(r.user, r.group)
	if err != nil {
		t.Fatal(err)
	}
	if r.config, err = clientcmd.BuildConfigFromFlags("", path); err != nil {
		t.Fatal(err)
	}
	r.config.QPS = -1 // the latency loop is not to be throttled client-side
	c, err := kubernetes.NewForConfig(r.config)
	if err != nil {
		t.Fatal(err)
	}
	r.client = c.Discovery().RESTClient()
	return r
}

func customListAs(ctx context.Context, c rest.Interface, path string) (*metricList, error) {
	b, err := c.Get().AbsPath(path).DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	var l metricList
	return &l, json.Unmarshal(b, &l)
}

// metricList is the part of a MetricValueList the test reads.
type metricList struct {
	Items []struct {
		Value resource.Quantity `json:"value"`
	} `json:"items"`
}

func resourceNames(ctx context.Context, groupVersion string) ([]string, error) {
	b, err := raw(ctx, groupVersion)
	if err != nil {
		return nil, err
	}
	var l metav1.APIResourceList
	if err := json.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	var out []string
	for _, r := range l.APIResources {
		out = append(out, r.Name)
	}
	return out, nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// forwardedLatency times the same forwarded Object metric read directly
// from the test adapter and through the aggregator and gpuscale, and
// gpuscale's own metric of the same Deployment through the aggregator:
// the difference between the last two is what forwarding adds.
func forwardedLatency(t *testing.T, ta *testAdapter, r reader, ns string) {
	ctx := context.Background()
	base := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/llm/"
	direct := rest.CopyConfig(r.config)
	direct.Host = ta.url
	direct.CAFile, direct.CAData = ta.caFile, nil
	dc, err := kubernetes.NewForConfig(direct)
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "gpuscale's own queue depth of the Deployment", func(ctx context.Context) (bool, error) {
		_, err := customListAs(ctx, r.client, base+"inference_queue_depth")
		return err == nil, nil
	})
	const n = 300
	ways := []struct {
		name   string
		client rest.Interface
		metric string
	}{
		{"direct", dc.Discovery().RESTClient(), "backend_queue"},
		{"through gpuscale", r.client, "backend_queue"},
		{"gpuscale's own", r.client, "inference_queue_depth"},
	}
	// The three ways take turns, so that the load of the shared machine
	// falls on each alike.
	timings := map[string][]time.Duration{}
	for i := range n + 20 { // 20 warm-up rounds
		for _, w := range ways {
			start := time.Now()
			if _, err := customListAs(ctx, w.client, base+w.metric); err != nil {
				t.Fatalf("%s: %v", w.name, err)
			}
			if i >= 20 {
				timings[w.name] = append(timings[w.name], time.Since(start))
			}
		}
	}
	q := func(name string, p float64) string {
		d := slices.Clone(timings[name])
		slices.Sort(d)
		return fmt.Sprintf("%.2f", float64(d[int(p*float64(len(d)-1))])/float64(time.Millisecond))
	}
	t.Logf("FIGURE forwarded metric (an Object metric of one Deployment, %d sequential GETs each, the three ways taking turns, kept-alive connections): direct to the test adapter p50 %s ms p99 %s ms, through the aggregator -> gpuscale -> test adapter p50 %s ms p99 %s ms; gpuscale's own metric through the aggregator p50 %s ms p99 %s ms",
		n, q("direct", .5), q("direct", .99), q("through gpuscale", .5), q("through gpuscale", .99), q("gpuscale's own", .5), q("gpuscale's own", .99))
}
