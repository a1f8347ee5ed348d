package kedascaler_test

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// fixture: the scaler over the real provider, served with mTLS on
// loopback, and a client holding a certificate of the trusted client CA.
type fixture struct {
	world    *world
	client   pb.ExternalScalerClient
	requests *kedascaler.Requests
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	w := newWorld(t)
	p := newPKI(t)
	req := kedascaler.NewRequests()
	addr := serve(t, w, kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}, req)
	return &fixture{world: w, client: dial(t, addr, p.servingCA, &p.client), requests: req}
}

func ref(md map[string]string) *pb.ScaledObjectRef {
	// KEDA passes its own keys along with the trigger's.
	full := map[string]string{"scalerAddress": "127.0.0.1:6000", "enableTLS": "true"}
	for k, v := range md {
		full[k] = v
	}
	return &pb.ScaledObjectRef{Name: "llm", Namespace: ns, ScalerMetadata: full}
}

func TestMetadataErrors(t *testing.T) {
	f := newFixture(t)
	queue := map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}
	with := func(changes map[string]string, drop ...string) map[string]string {
		md := map[string]string{}
		for k, v := range queue {
			md[k] = v
		}
		for _, k := range drop {
			delete(md, k)
		}
		for k, v := range changes {
			md[k] = v
		}
		return md
	}
	cases := []struct {
		name string
		md   map[string]string
		code codes.Code
		says string // the key or signal the message must name
	}{
		{"no signal", with(nil, "signal"), codes.InvalidArgument, `"signal" is required`},
		{"unknown signal", with(map[string]string{"signal": "gpu_temperature"}), codes.NotFound, `"gpu_temperature"`},
		{"namespace key", with(map[string]string{"namespace": "team-b"}), codes.InvalidArgument, `"namespace"`},
		{"misspelt key", with(map[string]string{"tagret": "5"}), codes.InvalidArgument, `"tagret"`},
		{"model and object", with(map[string]string{"object": "deployment/llm"}), codes.InvalidArgument, `"model"`},
		{"neither model nor object", with(nil, "model"), codes.InvalidArgument, `"object"`},
		{"object kind", with(map[string]string{"object": "pod/llm-0"}, "model"), codes.InvalidArgument, `"pod/llm-0"`},
		{"object without name", with(map[string]string{"object": "deployment/"}, "model"), codes.InvalidArgument, `"object"`},
		{"model not a label value", with(map[string]string{"model": "meta-llama/" + strings.Repeat("x", 60)}), codes.InvalidArgument, `"model"`},
		{"signal not per model", with(map[string]string{"signal": "gpu_utilization"}), codes.InvalidArgument, `"gpu_utilization"`},
		{"no target", with(nil, "target"), codes.InvalidArgument, `"target" is required`},
		{"target zero", with(map[string]string{"target": "0"}), codes.InvalidArgument, `"target"`},
		{"target not a number", with(map[string]string{"target": "five"}), codes.InvalidArgument, `"target"`},
		{"target infinite", with(map[string]string{"target": "Inf"}), codes.InvalidArgument, `"target"`},
		{"activation negative", with(map[string]string{"activationTarget": "-1"}), codes.InvalidArgument, `"activationTarget"`},
		{"activation not a number", with(map[string]string{"activationTarget": "NaN"}), codes.InvalidArgument, `"activationTarget"`},
		{"key twice", with(map[string]string{"targetFromEnv": "5"}), codes.InvalidArgument, `"target"`},
		{"role without a model", with(map[string]string{"signal": "inference_capacity_utilization", "object": "deployment/llm", "role": "decode"}, "model"), codes.InvalidArgument, `"role"`},
		{"unknown role", with(map[string]string{"signal": "inference_capacity_utilization", "role": "both"}), codes.InvalidArgument, `"role"`},
		{"signal not per role", with(map[string]string{"role": "decode"}), codes.InvalidArgument, `"inference_queue_depth"`},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ref(c.md)
			calls := map[string]error{}
			_, calls["GetMetricSpec"] = f.client.GetMetricSpec(ctx, r)
			_, calls["GetMetrics"] = f.client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: "x"})
			_, calls["IsActive"] = f.client.IsActive(ctx, r)
			stream, err := f.client.StreamIsActive(ctx, r)
			if err == nil {
				_, err = stream.Recv()
			}
			calls["StreamIsActive"] = err
			for method, err := range calls {
				st := status.Convert(err)
				if st.Code() != c.code || !strings.Contains(st.Message(), c.says) {
					t.Errorf("%s: %v, want %v naming %s", method, err, c.code, c.says)
				}
			}
		})
	}
	if n := testutil.ToFloat64(f.requests.Vec().WithLabelValues("GetMetricSpec", "InvalidArgument")); n != float64(len(cases)-1) {
		t.Errorf("InvalidArgument GetMetricSpec calls counted: %v, want %d", n, len(cases)-1)
	}
}

func TestNamespaceIsTheScaledObjects(t *testing.T) {
	f := newFixture(t)
	f.world.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 7)
	md := map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}
	r := ref(md)
	r.Namespace = "team-b" // no pod there: the value of team-a is not read
	_, err := f.client.GetMetrics(context.Background(), &pb.GetMetricsRequest{ScaledObjectRef: r})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("another namespace's ScaledObject: %v, want Unavailable", err)
	}
	r.Namespace = ""
	if _, err := f.client.IsActive(context.Background(), r); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no namespace: %v, want InvalidArgument", err)
	}
}

func TestScopes(t *testing.T) {
	f := newFixture(t)
	w := f.world
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 7)
	w.put("llm-0", signal.SourceGPU, "", signal.GPUUtilization, 55.5)
	w.put("db-0", signal.SourceInference, "mistral", signal.RequestsRunning, 3)
	w.put("hf-0", signal.SourceInference, "meta-llama/Llama-3.1-8B-Instruct", signal.QueueDepth, 4)
	decode := store.Sample{Time: time.Now(), Model: "llama"}
	decode.Set(signal.RequestsRunning, 20)
	decode.Set(signal.QueueDepth, 0)
	decode.Set(signal.KVCacheUtilization, 40)
	w.store.PutPod(store.Key{Namespace: ns, Name: "llm-decode-0"}, signal.SourceInference, decode)
	cases := []struct {
		name       string
		md         map[string]string
		metricName string
		want       float64
		code       codes.Code
	}{
		{"model external", map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"},
			"gpuscale-inference_queue_depth-model-llama", 7, codes.OK},
		// A Hugging Face id, as served, is selected by its label value.
		{"model named with a slash", map[string]string{"signal": "inference_queue_depth", "model": "meta-llama/Llama-3.1-8B-Instruct", "target": "5"},
			"gpuscale-inference_queue_depth-model-meta-llama_llama-3.1-8b-instruct", 4, codes.OK},
		{"deployment object", map[string]string{"signal": "gpu_utilization", "object": "deployment/llm", "target": "70"},
			"gpuscale-gpu_utilization-deployment-llm", 55.5, codes.OK},
		{"statefulset object", map[string]string{"signal": "inference_requests_running", "object": "statefulset/db", "target": "2.5"},
			"gpuscale-inference_requests_running-statefulset-db", 3, codes.OK},
		{"model without data", map[string]string{"signal": "inference_queue_depth", "model": "gemma", "target": "5"},
			"gpuscale-inference_queue_depth-model-gemma", 0, codes.Unavailable},
		{"no such deployment", map[string]string{"signal": "gpu_utilization", "object": "deployment/other", "target": "5"},
			"gpuscale-gpu_utilization-deployment-other", 0, codes.Unavailable},
		{"signal without samples", map[string]string{"signal": "inference_kv_cache_utilization", "object": "deployment/llm", "target": "80"},
			"gpuscale-inference_kv_cache_utilization-deployment-llm", 0, codes.Unavailable},
		{"capacity without history", map[string]string{"signal": "inference_capacity_utilization", "object": "deployment/llm", "target": "0.8"},
			"gpuscale-inference_capacity_utilization-deployment-llm", 0, codes.Unavailable},
		// The decode pool's 20 requests fill 40% of its KV cache: 50
		// fit, of which MaxLoad(50, 0.1) are served within the
		// objective.
		{"model and role", map[string]string{"signal": "inference_capacity_utilization", "model": "llama", "role": "decode", "target": "1"},
			"gpuscale-inference_capacity_utilization-model-llama-decode", 20 / capacity.MaxLoad(50, 0.1), codes.OK},
		{"model and a role without pods", map[string]string{"signal": "inference_capacity_utilization", "model": "llama", "role": "prefill", "target": "1"},
			"gpuscale-inference_capacity_utilization-model-llama-prefill", 0, codes.Unavailable},
	}
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := ref(c.md)
			spec, err := f.client.GetMetricSpec(ctx, r)
			if err != nil {
				t.Fatal(err)
			}
			if len(spec.MetricSpecs) != 1 || spec.MetricSpecs[0].MetricName != c.metricName || spec.MetricSpecs[0].TargetSizeFloat <= 0 {
				t.Fatalf("spec %v, want one %s with the target", spec.MetricSpecs, c.metricName)
			}
			got, err := f.client.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r, MetricName: c.metricName})
			if status.Code(err) != c.code {
				t.Fatalf("GetMetrics: %v, want %v", err, c.code)
			}
			if c.code != codes.OK {
				if got != nil {
					t.Fatalf("no data answered with %v", got)
				}
				return
			}
			if len(got.MetricValues) != 1 || math.Abs(got.MetricValues[0].MetricValueFloat-c.want) > 0.001 || got.MetricValues[0].MetricName != c.metricName {
				t.Fatalf("GetMetrics: %v, want %s = %v", got.MetricValues, c.metricName, c.want)
			}
		})
	}
}

func TestActivation(t *testing.T) {
	f := newFixture(t)
	f.world.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 3)
	cases := []struct {
		activation string // "" leaves the default, 0
		want       bool
	}{{"", true}, {"2", true}, {"3", false}, {"5.5", false}}
	for _, c := range cases {
		md := map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}
		if c.activation != "" {
			md["activationTarget"] = c.activation
		}
		got, err := f.client.IsActive(context.Background(), ref(md))
		if err != nil || got.Result != c.want {
			t.Errorf("queue 3, activationTarget %q: %v %v, want %v", c.activation, got, err, c.want)
		}
	}
	f.world.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 0)
	got, err := f.client.IsActive(context.Background(), ref(map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}))
	if err != nil || got.Result {
		t.Errorf("empty queue, default activation: %v %v, want inactive", got, err)
	}
}

// TestStreamPushesChanges: StreamIsActive sends the first activity at once,
// a change within a few check intervals, and nothing while it holds.
func TestStreamPushesChanges(t *testing.T) {
	f := newFixture(t)
	w := f.world
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := f.client.StreamIsActive(ctx, ref(map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan bool, 10)
	go func() {
		for {
			r, err := stream.Recv()
			if err != nil {
				close(got)
				return
			}
			got <- r.Result
		}
	}()
	expect := func(want bool) time.Duration {
		t.Helper()
		start := time.Now()
		select {
		case v, ok := <-got:
			if !ok || v != want {
				t.Fatalf("stream sent %v (open %v), want %v", v, ok, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no push of %v within 5s", want)
		}
		return time.Since(start)
	}
	expect(false)
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 4)
	t.Logf("a queue pushed as active after %v", expect(true))
	// Unchanged activity is not sent again: the stream reads the new
	// value a few times, and the next message is the change that follows.
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 9)
	read := w.reads.Load()
	testenv.WaitFor(t, 5*time.Second, "the stream to read the held value 3 times", func(context.Context) (bool, error) {
		return w.reads.Load() >= read+3, nil
	})
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 0)
	expect(false)
}

func TestMutualTLS(t *testing.T) {
	w := newWorld(t)
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 1)
	p := newPKI(t)
	r := ref(map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"})
	strict := serve(t, w, kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}, nil)
	open := serve(t, w, kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, NoClientAuth: true}, nil)
	cases := []struct {
		name, addr string
		cert       bool
		stranger   bool
		ok         bool
	}{
		{"client CA's certificate", strict, true, false, true},
		{"no certificate", strict, false, false, false},
		{"another CA's certificate", strict, true, true, false},
		{"client auth off, no certificate", open, false, false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cert := &p.client
			if c.stranger {
				cert = &p.strangerClient
			}
			if !c.cert {
				cert = nil
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := dial(t, c.addr, p.servingCA, cert).IsActive(ctx, r)
			if c.ok != (err == nil) {
				t.Fatalf("IsActive: %v %v, want success %v", got, err, c.ok)
			}
			if !c.ok && status.Code(err) != codes.Unavailable {
				t.Fatalf("refused handshake: %v, want Unavailable", err)
			}
		})
	}
}

func TestTLSFilesRequired(t *testing.T) {
	w := newWorld(t)
	p := newPKI(t)
	cases := []struct {
		name  string
		files kedascaler.TLSFiles
		says  string
	}{
		{"no client CA", kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile}, "client CA"},
		{"client CA and no client auth", kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile, NoClientAuth: true}, "exclude"},
		{"no serving pair", kedascaler.TLSFiles{ClientCAFile: p.clientCAFile}, "serving"},
		{"client CA not a certificate", kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.keyFile}, "CA"},
	}
	for _, c := range cases {
		_, err := kedascaler.NewServer(kedascaler.Config{Metrics: w.provider, TLS: c.files, AllowAllNamespaces: true})
		if err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %v, want an error naming %s", c.name, err, c.says)
		}
	}
}
