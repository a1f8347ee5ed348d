package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestRawURLShapes: every URL shape the adapter serves answers through the
// aggregator with values that agree with each other, and a subject RBAC
// does not allow gets 403 through the same path.
func TestRawURLShapes(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-raw")
	sel := deployment(t, ns, "llm", 2)
	env.World.SetRate(ns, sel, 40) // above two replicas' capacity: queues build
	pods := podsOf(t, ns, sel)
	pod, node := pods[0].Name, pods[0].Spec.NodeName
	model := url.QueryEscape("model_name=model-llm")
	base := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns

	ctx := context.Background()
	testenv.WaitFor(t, 30*time.Second, "queue depth for both pods", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, base+"/pods/*/inference_queue_depth")
		return err == nil && len(l.Items) == 2, nil
	})
	testenv.WaitFor(t, 30*time.Second, "GPU utilization attributed to both pods", func(ctx context.Context) (bool, error) {
		l, err := customList(ctx, base+"/pods/*/gpu_utilization?labelSelector=app%3Dllm")
		return err == nil && len(l.Items) == 2 && milli(l.Items[0].Value) > 0, nil
	})

	cases := []struct {
		name, path string
		check      func(t *testing.T, body []byte)
	}{
		{"pods star", base + "/pods/*/inference_requests_running", nil},
		{"one pod", base + "/pods/" + pod + "/inference_kv_cache_utilization", nil},
		{"label selector", base + "/pods/*/gpu_memory_used_bytes?labelSelector=app%3Dllm", nil},
		{"ttft quantile", base + "/pods/*/inference_ttft_seconds_p90", nil},
		{"node", "/apis/custom.metrics.k8s.io/v1beta2/nodes/" + node + "/gpu_utilization", nil},
		{"deployment object", base + "/deployments.apps/llm/inference_queue_depth", nil},
		{"namespace object", "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/metrics/inference_requests_running", nil},
		{"v1beta1", "/apis/custom.metrics.k8s.io/v1beta1/namespaces/" + ns + "/pods/*/inference_queue_depth", nil},
		{"external by model", "/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/inference_queue_depth?labelSelector=" + model, func(t *testing.T, b []byte) {
			if !strings.Contains(string(b), `"model_name":"model-llm"`) {
				t.Errorf("external answer lacks the model label: %s", b)
			}
		}},
		{"list all", "/apis/custom.metrics.k8s.io/v1beta2", func(t *testing.T, b []byte) {
			for _, want := range []string{"pods/gpu_utilization", "nodes/gpu_utilization", "deployments.apps/inference_ttft_seconds_p90"} {
				if !strings.Contains(string(b), want) {
					t.Errorf("discovery lacks %s", want)
				}
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var body []byte
			testenv.WaitFor(t, 30*time.Second, tc.path, func(ctx context.Context) (bool, error) {
				b, err := raw(ctx, tc.path)
				body = b
				return err == nil, nil
			})
			if tc.check != nil {
				tc.check(t, body)
			}
		})
	}

	t.Run("object equals the sum of its pods", func(t *testing.T) {
		// Both answers come from the same store snapshot between two
		// scrapes; retry across a scrape boundary.
		testenv.WaitFor(t, 15*time.Second, "deployment queue == sum of pods", func(ctx context.Context) (bool, error) {
			l, err := customList(ctx, base+"/pods/*/inference_queue_depth")
			if err != nil {
				return false, nil
			}
			d, err := customValue(ctx, base+"/deployments.apps/llm/inference_queue_depth")
			if err != nil {
				return false, nil
			}
			sum := 0.0
			for _, it := range l.Items {
				sum += milli(it.Value)
			}
			return sum > 0 && milli(d.Value) == sum && d.DescribedObject.APIVersion == "apps/v1", nil
		})
	})

	t.Run("described objects use v1 for core kinds", func(t *testing.T) {
		l, err := customList(ctx, base+"/pods/*/inference_queue_depth")
		if err != nil {
			t.Fatal(err)
		}
		if l.Items[0].DescribedObject.APIVersion != "v1" || l.Items[0].DescribedObject.Kind != "Pod" {
			t.Errorf("described object = %+v", l.Items[0].DescribedObject)
		}
	})

	t.Run("kubectl get --raw", func(t *testing.T) {
		out, err := env.Cluster.Kubectl(ctx, "get", "--raw", base+"/pods/*/inference_queue_depth")
		if err != nil || !strings.Contains(string(out), `"metricName"`) && !strings.Contains(string(out), `"metric"`) {
			t.Fatalf("kubectl get --raw: %v: %s", err, out)
		}
	})

	t.Run("RBAC denies others", func(t *testing.T) {
		cfg := env.Cluster.RESTConfig()
		cfg.Impersonate.UserName = "system:serviceaccount:default:nobody"
		c, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, path := range []string{base + "/pods/*/inference_queue_depth",
			"/apis/external.metrics.k8s.io/v1beta1/namespaces/" + ns + "/inference_queue_depth"} {
			_, err := c.Discovery().RESTClient().Get().RequestURI(path).DoRaw(ctx)
			if !apierrors.IsForbidden(err) {
				t.Errorf("%s as nobody: err = %v, want 403 Forbidden", path, err)
			}
		}
	})

	t.Run("missing metric is NotFound", func(t *testing.T) {
		_, err := raw(ctx, base+"/pods/*/no_such_metric")
		if !apierrors.IsNotFound(err) {
			t.Errorf("err = %v, want 404", err)
		}
		_, err = raw(ctx, fmt.Sprintf("%s/pods/*/inference_queue_depth?labelSelector=app%%3Dnothing", base))
		if !apierrors.IsNotFound(err) {
			t.Errorf("empty selector match: err = %v, want 404 (never an empty success)", err)
		}
	})
}
