package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"google.golang.org/grpc"
	"k8s.io/apimachinery/pkg/util/wait"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpuscale/gpuscale/cmd/exporter/app"
	"github.com/gpuscale/gpuscale/internal/harness/testlog"
)

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	var buf testlog.Buffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("exporter logs:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// simOptions are flags for a simulated exporter on a free loopback port.
func simOptions(socket string) *app.Options {
	o := app.NewOptions()
	o.Backend = "sim"
	o.SimGPUs = 3
	o.Hostname = "node-test"
	o.CollectInterval = 50 * time.Millisecond
	o.PodResourcesSocket = socket
	o.PodResourcesInterval = 50 * time.Millisecond
	o.PodResourcesTimeout = time.Second
	o.ListenAddress = "127.0.0.1:0"
	return o
}

// exporterProc is a running app.Run.
type exporterProc struct {
	addr   string
	cancel context.CancelFunc
	done   chan error
}

// start runs the exporter until the test ends; the test fails if Run does
// not then return nil.
func start(t *testing.T, o *app.Options) *exporterProc {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	p := &exporterProc{cancel: cancel, done: make(chan error, 1)}
	addrc := make(chan net.Addr, 1)
	log := testLogger(t)
	go func() { p.done <- app.Run(ctx, o, log, func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		p.addr = a.String()
	case err := <-p.done:
		cancel()
		t.Fatalf("Run returned before listening: %v", err)
	case <-time.After(15 * time.Second):
		cancel()
		t.Fatal("exporter did not listen within 15s")
	}
	t.Cleanup(func() {
		if err := p.stop(); err != nil {
			t.Errorf("Run after cancel: %v, want nil", err)
		}
	})
	return p
}

// stop cancels Run and returns its result; later calls return nil.
func (p *exporterProc) stop() error {
	p.cancel()
	select {
	case err, ok := <-p.done:
		if ok {
			close(p.done)
		}
		return err
	case <-time.After(15 * time.Second):
		return context.DeadlineExceeded
	}
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// eventually retries check every 50 ms for up to 10 s.
func eventually(t *testing.T, what string, check func() error) {
	t.Helper()
	var last error
	if err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		last = check()
		return last == nil, nil
	}); err != nil {
		t.Fatalf("%s: still failing after 10s: %v", what, last)
	}
}

func parseScrape(body string) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(strings.NewReader(body))
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, lp := range m.GetLabel() {
		out[lp.GetName()] = lp.GetValue()
	}
	return out
}

// gpuList is the part of GET /api/v1/gpus the tests use.
type gpuList struct {
	GPUs []struct {
		Index int    `json:"index"`
		UUID  string `json:"uuid"`
		MIG   *struct {
			UUID    string `json:"uuid"`
			Profile string `json:"profile"`
		} `json:"mig"`
	} `json:"gpus"`
}

func fetchGPUs(t *testing.T, base string) gpuList {
	t.Helper()
	var l gpuList
	eventually(t, "GET /api/v1/gpus", func() error {
		resp, err := http.Get(base + "/api/v1/gpus")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			// 503 until the first collection: not an empty node.
			return fmt.Errorf("GET /api/v1/gpus: %s", resp.Status)
		}
		return json.NewDecoder(resp.Body).Decode(&l)
	})
	return l
}

// fakeKubelet serves the pod-resources List RPC on a unix socket.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	mu   sync.Mutex
	pods []*podresourcesv1.PodResources
}

func (k *fakeKubelet) List(context.Context, *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return &podresourcesv1.ListPodResourcesResponse{PodResources: k.pods}, nil
}

func (k *fakeKubelet) setPods(pods ...*podresourcesv1.PodResources) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.pods = pods
}

// serveKubelet starts k on a fresh socket. os.MkdirTemp keeps the path under
// the unix socket length limit that t.TempDir's long names can exceed.
func serveKubelet(t *testing.T, k *fakeKubelet) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "kubelet.sock")
	lis, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(srv, k)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		os.RemoveAll(dir)
	})
	return socket
}

func pod(namespace, name, container, resource string, ids ...string) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: namespace, Name: name, Containers: []*podresourcesv1.ContainerResources{{
		Name:    container,
		Devices: []*podresourcesv1.ContainerDevices{{ResourceName: resource, DeviceIds: ids}},
	}}}
}
