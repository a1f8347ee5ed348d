package kedascaler_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"github.com/gpuscale/gpuscale/pkg/adapter/kedascaler"
	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// rbac stands for Kubernetes' authorizer: tenant-a may read the metrics
// APIs in team-a, the group keda:readers everywhere, nobody else anything.
// It records what it was asked.
type rbac struct {
	mu    sync.Mutex
	asked []authorizer.Attributes
	deny  bool // everyone, from now on
}

func (r *rbac) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, a)
	if r.deny {
		return authorizer.DecisionNoOpinion, "binding removed", nil
	}
	for _, g := range a.GetUser().GetGroups() {
		if g == "keda:readers" {
			return authorizer.DecisionAllow, "", nil
		}
	}
	if a.GetUser().GetName() == "tenant-a" && a.GetNamespace() == ns {
		return authorizer.DecisionAllow, "", nil
	}
	return authorizer.DecisionNoOpinion, "no RoleBinding", nil
}

func (r *rbac) last() authorizer.Attributes {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.asked[len(r.asked)-1]
}

// authorized is the scaler with an authorizer, and clients of several
// identities, all holding certificates of the trusted client CA.
type authorized struct {
	world *world
	authz *rbac
	as    map[string]pb.ExternalScalerClient
}

func newAuthorized(t *testing.T) *authorized {
	t.Helper()
	w := newWorld(t)
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 3)
	w.put("llm-0", signal.SourceGPU, "", signal.GPUUtilization, 50)
	p := newPKI(t)
	a := &authorized{world: w, authz: &rbac{}, as: map[string]pb.ExternalScalerClient{}}
	addr := serveConfig(t, kedascaler.Config{Metrics: w.provider, CheckInterval: 20 * time.Millisecond, Authorizer: a.authz,
		TLS: kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}})
	for name, cert := range map[string]tls.Certificate{
		"tenant-a":      p.identity(t, "tenant-a", "tenants"),
		"tenant-b":      p.identity(t, "tenant-b", "tenants"),
		"keda-operator": p.identity(t, "keda-operator", "keda:readers"),
		"no name":       p.identity(t, "", "keda:readers"),
	} {
		a.as[name] = dial(t, addr, p.servingCA, &cert)
	}
	return a
}

var (
	modelQueue = map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": "5"}
	deployUtil = map[string]string{"signal": "gpu_utilization", "object": "deployment/llm", "target": "60"}
)

// calls are the scaler's four methods, each returning its error.
var calls = map[string]func(ctx context.Context, c pb.ExternalScalerClient, r *pb.ScaledObjectRef) error{
	"GetMetricSpec": func(ctx context.Context, c pb.ExternalScalerClient, r *pb.ScaledObjectRef) error {
		_, err := c.GetMetricSpec(ctx, r)
		return err
	},
	"GetMetrics": func(ctx context.Context, c pb.ExternalScalerClient, r *pb.ScaledObjectRef) error {
		_, err := c.GetMetrics(ctx, &pb.GetMetricsRequest{ScaledObjectRef: r})
		return err
	},
	"IsActive": func(ctx context.Context, c pb.ExternalScalerClient, r *pb.ScaledObjectRef) error {
		_, err := c.IsActive(ctx, r)
		return err
	},
	"StreamIsActive": func(ctx context.Context, c pb.ExternalScalerClient, r *pb.ScaledObjectRef) error {
		s, err := c.StreamIsActive(ctx, r)
		if err == nil {
			_, err = s.Recv()
		}
		return err
	},
}

// TestNamespacesAreAuthorizedPerClient: a client reads a namespace only if
// Kubernetes' authorizer lets its certificate's user (or groups) read the
// same metric through the metrics APIs there. A tenant holding its own
// client key, as a TriggerAuthentication's Secret in its namespace gives
// it, reads nothing of another namespace, by any method.
func TestNamespacesAreAuthorizedPerClient(t *testing.T) {
	a := newAuthorized(t)
	for _, tc := range []struct {
		client string
		md     map[string]string
		code   codes.Code
	}{
		{"tenant-a", modelQueue, codes.OK},
		{"tenant-a", deployUtil, codes.OK},
		{"keda-operator", modelQueue, codes.OK},
		{"tenant-b", modelQueue, codes.PermissionDenied},
		{"tenant-b", deployUtil, codes.PermissionDenied},
		{"no name", modelQueue, codes.Unauthenticated},
	} {
		for method, call := range calls {
			t.Run(tc.client+"/"+tc.md["signal"]+"/"+method, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				err := call(ctx, a.as[tc.client], ref(tc.md))
				if got := status.Code(err); got != tc.code {
					t.Fatalf("%v, want %v", err, tc.code)
				}
			})
		}
	}
	// What was asked is the metrics API read of the same value.
	ctx := context.Background()
	for _, tc := range []struct {
		md                                             map[string]string
		verb, group, version, resource, sub, name, msg string
	}{
		{modelQueue, "list", "external.metrics.k8s.io", "v1beta1", "inference_queue_depth", "", "", "list external.metrics.k8s.io inference_queue_depth in namespace team-a"},
		{deployUtil, "get", "custom.metrics.k8s.io", "v1beta2", "deployments.apps", "gpu_utilization", "llm", "get custom.metrics.k8s.io deployments.apps/llm/gpu_utilization in namespace team-a"},
	} {
		_, err := a.as["tenant-b"].IsActive(ctx, ref(tc.md))
		if !strings.Contains(status.Convert(err).Message(), tc.msg) {
			t.Errorf("refusal %q does not say %q", status.Convert(err).Message(), tc.msg)
		}
		got := a.authz.last()
		if got.GetUser().GetName() != "tenant-b" || strings.Join(got.GetUser().GetGroups(), ",") != "tenants" || got.GetVerb() != tc.verb ||
			got.GetAPIGroup() != tc.group || got.GetAPIVersion() != tc.version || got.GetNamespace() != ns || got.GetResource() != tc.resource ||
			got.GetSubresource() != tc.sub || got.GetName() != tc.name || !got.IsResourceRequest() {
			t.Errorf("asked %s %+v for %v", got.GetUser().GetName(), got, tc.md)
		}
	}
}

// TestStreamsEndWhenNoLongerAuthorized: a stream's client is authorized
// again while the stream lasts; once it may no longer read the namespace,
// the stream ends with PermissionDenied.
func TestStreamsEndWhenNoLongerAuthorized(t *testing.T) {
	kedascaler.SetReauthorizeEvery(t, 50*time.Millisecond)
	a := newAuthorized(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := a.as["tenant-a"].StreamIsActive(ctx, ref(modelQueue))
	must(t, err)
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	a.authz.mu.Lock()
	a.authz.deny = true
	a.authz.mu.Unlock()
	for {
		_, err := s.Recv()
		if err == nil {
			continue
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("stream ended with %v, want PermissionDenied", err)
		}
		return
	}
}

// TestStreamsAreBounded: StreamIsActive streams past the per-namespace or
// the total bound are refused with ResourceExhausted; the others keep
// being served, and a stream that ends gives its place back.
func TestStreamsAreBounded(t *testing.T) {
	for _, tc := range []struct {
		name   string
		limits kedascaler.Limits
		open   int
		says   string
	}{
		{"per namespace", kedascaler.Limits{MaxStreams: 100, MaxStreamsPerNamespace: 4}, 4, "namespace team-a has 4"},
		{"in all", kedascaler.Limits{MaxStreams: 3, MaxStreamsPerNamespace: 10}, 3, "3 StreamIsActive streams are open"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t)
			w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 3)
			p := newPKI(t)
			addr := serveConfig(t, kedascaler.Config{Metrics: w.provider, CheckInterval: 20 * time.Millisecond, AllowAllNamespaces: true, Limits: tc.limits,
				TLS: kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}})
			c := dial(t, addr, p.servingCA, &p.client)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			open := func() (context.CancelFunc, error) {
				sctx, scancel := context.WithCancel(ctx)
				s, err := c.StreamIsActive(sctx, ref(modelQueue))
				if err == nil {
					_, err = s.Recv()
				}
				return scancel, err
			}
			var first context.CancelFunc
			for i := range tc.open {
				stop, err := open()
				if err != nil {
					t.Fatalf("stream %d: %v", i, err)
				}
				if i == 0 {
					first = stop
				} else {
					defer stop()
				}
			}
			_, err := open()
			if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("one stream too many: %v, want ResourceExhausted saying %q", err, tc.says)
			}
			// Unary calls are not streams: still served.
			if _, err := c.IsActive(ctx, ref(modelQueue)); err != nil {
				t.Fatal(err)
			}
			first()
			for {
				stop, err := open()
				if err == nil {
					stop()
					return
				}
				if status.Code(err) != codes.ResourceExhausted || ctx.Err() != nil {
					t.Fatalf("after one stream ended: %v", err)
				}
			}
		})
	}
}

// TestSilentConnectionsAreDropped: connections that never complete a TLS
// handshake are closed after the handshake timeout, those past the bound
// from one address at once, and a client from another address is served
// meanwhile. (Silent connections were once held 118 s each, without
// bound.)
func TestSilentConnectionsAreDropped(t *testing.T) {
	w := newWorld(t)
	w.put("llm-0", signal.SourceInference, "llama", signal.QueueDepth, 3)
	p := newPKI(t)
	addr := serveConfig(t, kedascaler.Config{Metrics: w.provider, AllowAllNamespaces: true,
		Limits: kedascaler.Limits{HandshakeTimeout: 500 * time.Millisecond, MaxConnectionsPerAddress: 4},
		TLS:    kedascaler.TLSFiles{CertFile: p.certFile, KeyFile: p.keyFile, ClientCAFile: p.clientCAFile}})
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	var silent []net.Conn
	for range 10 {
		c, err := d.Dial("tcp", addr)
		must(t, err)
		defer c.Close()
		silent = append(silent, c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dial(t, addr, p.servingCA, &p.client).IsActive(ctx, ref(modelQueue)); err != nil {
		t.Fatalf("a client from another address: %v", err)
	}
	for i, c := range silent {
		must(t, c.SetReadDeadline(time.Now().Add(20*time.Second)))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("silent connection %d still open after 20 s", i)
		}
		if err == nil {
			t.Fatalf("silent connection %d: the server wrote to it", i)
		}
		if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
			t.Logf("silent connection %d: %v", i, err)
		}
	}
}

// TestTargetsStayInRange: a target past 2^53 is refused, and the
// deprecated integer target of one in range is never wrapped around (a
// target of 9.3e18 was served as -9223372036854775808).
func TestTargetsStayInRange(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	for _, tc := range []struct {
		target string
		want   int64
		code   codes.Code
	}{
		{"9.3e18", 0, codes.InvalidArgument},
		{"1e300", 0, codes.InvalidArgument},
		{"9007199254740992", 1 << 53, codes.OK},
		{"2.5", 3, codes.OK},
	} {
		spec, err := f.client.GetMetricSpec(ctx, ref(map[string]string{"signal": "inference_queue_depth", "model": "llama", "target": tc.target}))
		if status.Code(err) != tc.code {
			t.Fatalf("target %s: %v, want %v", tc.target, err, tc.code)
		}
		if err == nil && spec.MetricSpecs[0].TargetSize != tc.want {
			t.Errorf("target %s: targetSize %d, want %d", tc.target, spec.MetricSpecs[0].TargetSize, tc.want)
		}
	}
}

// TestErrorsRepeatLittleOfTheMetadata: an error about a 60 KB metadata
// key or value names it in a few dozen bytes, not whole.
func TestErrorsRepeatLittleOfTheMetadata(t *testing.T) {
	f := newFixture(t)
	huge := strings.Repeat("x", 60_000)
	for name, md := range map[string]map[string]string{
		"unknown key":      {"signal": "inference_queue_depth", "model": "llama", "target": "5", huge: "1"},
		"target":           {"signal": "inference_queue_depth", "model": "llama", "target": huge},
		"model":            {"signal": "inference_queue_depth", "model": huge, "target": "5"},
		"object":           {"signal": "gpu_utilization", "object": "deployment/" + huge, "target": "5"},
		"signal":           {"signal": huge, "model": "llama", "target": "5"},
		"activationTarget": {"signal": "inference_queue_depth", "model": "llama", "target": "5", "activationTarget": huge},
	} {
		_, err := f.client.GetMetricSpec(context.Background(), ref(md))
		if err == nil {
			t.Fatalf("%s: no error", name)
		}
		if msg := status.Convert(err).Message(); len(msg) > 1024 {
			t.Errorf("%s: a %d-byte error", name, len(msg))
		}
	}
}
