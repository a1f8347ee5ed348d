package promsource

import (
	"context"
	"math"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// FuzzResponse: whatever a Prometheus-compatible server answers (any
// status, any body), the source neither panics nor returns a value that is
// not a finite number for a pod, model or node it was asked about.
func FuzzResponse(f *testing.F) {
	f.Add(200, vector(t0, series{podLabels("a"), "2"}, series{podLabels("b"), "NaN"}))
	f.Add(200, vector(t0, series{map[string]string{"model_name": "llama"}, "+Inf"}, series{map[string]string{"Hostname": "gpu-1"}, "-1e308"}))
	f.Add(200, `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{},"values":[[1,"1"]]}]}}`)
	f.Add(200, `{"status":"success","data":{"resultType":"scalar","result":[1,"1e400"]}}`)
	f.Add(200, `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"pod":"a"},"value":[1e300,"1"]}]}}`)
	f.Add(422, `{"status":"error","errorType":"execution","error":"many-to-many matching not allowed"}`)
	f.Add(503, `<html>proxy error</html>`)
	f.Add(200, `{"status":"success","data":{"resultType":"vector","result":[`)
	// Found by the fuzzer: a 2xx answer with no data decoded to a nil
	// value, and the source panicked naming its type.
	f.Add(277, `{}`)
	f.Add(200, `{"status":"success"}`)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 100 || status > 599 {
			status = 200
		}
		fp := newFakeProm(t)
		fp.setReply(func(string) (int, string) { return status, body })
		s := newSource(t, fp)
		ctx := context.Background()
		pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b", true)}
		finite := func(what string, v provider.Value) {
			if v.Valid() && (math.IsNaN(v.V) || math.IsInf(v.V, 0)) {
				t.Errorf("%s: served %v", what, v.V)
			}
		}
		for _, name := range []string{provider.QueueDepth, provider.TTFTP90, provider.GPUUtilization} {
			m := metric(t, name)
			if vals, err := s.Pods(ctx, provider.NewPodSet("ml", pods), m, nil); err == nil {
				if len(vals) != len(pods) {
					t.Errorf("%s: %d values for %d pods", name, len(vals), len(pods))
				}
				for _, v := range vals {
					finite(name+" pods", v)
				}
			}
			if v, ok, err := s.Workload(ctx, "ml", pods, m, nil); err == nil && ok {
				finite(name+" workload", v)
			}
			if models, err := s.Models(ctx, "ml", pods, m, nil); err == nil {
				for k, v := range models {
					if strings.TrimSpace(k) == "" {
						t.Errorf("%s: a value for a model with no name", name)
					}
					finite(name+" model "+k, v)
				}
			}
		}
		if nodes, err := s.Nodes(ctx, []string{"gpu-1"}, metric(t, provider.GPUUtilization)); err == nil {
			for k, v := range nodes {
				if k != "gpu-1" {
					t.Errorf("a value for node %q, which was not asked about", k)
				}
				finite("node", v)
			}
		}
	})
}

// TestResponseCap: an answer past Config.MaxResponseBytes is an error,
// not a value and not the adapter's memory.
func TestResponseCap(t *testing.T) {
	fp := newFakeProm(t)
	big := vector(t0, series{podLabels("a"), "2"}, series{map[string]string{"pod": "b", "pad": strings.Repeat("x", 4<<10)}, "5"})
	fp.setReply(func(string) (int, string) { return 200, big })
	s, err := New(Config{URL: fp.URL, MaxResponseBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b", true)}
	if vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err == nil {
		t.Fatalf("an answer of %d bytes over a 1 KiB cap gave %+v, want an error", len(big), vals)
	}
	s, err = New(Config{URL: fp.URL})
	if err != nil {
		t.Fatal(err)
	}
	if vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err != nil || vals[0].V != 2 {
		t.Fatalf("the same answer under the default cap: %+v, %v", vals, err)
	}
}
