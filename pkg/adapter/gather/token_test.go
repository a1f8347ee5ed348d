package gather

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/tokenfile"
)

// authSeen records the Authorization header each of the test's targets
// got last.
type authSeen struct {
	mu   sync.Mutex
	seen map[string]string
}

func (a *authSeen) handler(who string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		a.seen[who] = r.Header.Get("Authorization")
		a.mu.Unlock()
		_, _ = w.Write([]byte("# empty\n"))
	})
}

func (a *authSeen) get(who string) (string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.seen[who]
	return v, ok
}

// tokenGatherer scrapes one exporter and one tenant's pod, sending the
// exporters token's current value.
func tokenGatherer(t *testing.T, token func() []byte) (*Gatherer, *authSeen) {
	t.Helper()
	a := &authSeen{seen: map[string]string{}}
	_, exporterPort := serve(t, a.handler("exporter"))
	_, tenantPort := serve(t, a.handler("tenant"))
	g, err := New(Config{
		Pods:    podList{annotatedPod("tenant", tenantPort), exporterPod("exporter-x", "node-a")},
		Scraper: scrape.New(scrape.Config{Timeout: time.Second}), Store: store.New(10),
		Interval: time.Second, Registerer: prometheus.NewRegistry(), Discovery: exporterDiscovery(exporterPort),
		ExporterToken: token,
	})
	if err != nil {
		t.Fatal(err)
	}
	return g, a
}

// TestExporterTokenSentToExportersAlone: the exporters' reserved-lane
// token goes to the exporter DaemonSet's pods, never to an inference pod,
// which any tenant runs.
func TestExporterTokenSentToExportersAlone(t *testing.T) {
	g, a := tokenGatherer(t, func() []byte { return []byte("reserved-lane-token") })
	g.Cycle(context.Background())
	if got, _ := a.get("exporter"); got != "Bearer reserved-lane-token" {
		t.Errorf("the exporter got Authorization %q", got)
	}
	if got, ok := a.get("tenant"); !ok || got != "" {
		t.Errorf("the tenant's pod got Authorization %q (scraped: %v)", got, ok)
	}
}

// TestExporterTokenFollowsItsFile: the adapter's --exporter-token-file is
// an optional Secret volume, empty until the Secret exists. The adapter
// scrapes without a token until the file appears, then sends it, and the
// new one once it changes; the tenant never gets one.
func TestExporterTokenFollowsItsFile(t *testing.T) {
	const tokenA, tokenB = "0123456789abcdef-token-a", "0123456789abcdef-token-b"
	dir := t.TempDir()
	path := filepath.Join(dir, "token")
	f, err := tokenfile.New(tokenfile.Config{Path: path, MinLength: 16, Metric: "test_exporter_token"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	g, a := tokenGatherer(t, f.Token)

	for _, step := range []struct {
		name, file, want string
	}{
		{"no token file", "", ""},
		{"the Secret projected", tokenA, "Bearer " + tokenA},
		{"the Secret changed", tokenB, "Bearer " + tokenB},
	} {
		if step.file != "" {
			tmp := filepath.Join(dir, "..data_tmp")
			if err := os.WriteFile(tmp, []byte(step.file), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
		}
		var got string
		if err := wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			g.Cycle(ctx)
			got, _ = a.get("exporter")
			return got == step.want, nil
		}); err != nil {
			t.Errorf("%s: the exporter got Authorization %q, want %q", step.name, got, step.want)
		}
		if got, ok := a.get("tenant"); !ok || got != "" {
			t.Errorf("%s: the tenant's pod got Authorization %q (scraped: %v)", step.name, got, ok)
		}
	}
}
