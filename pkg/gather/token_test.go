package gather

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/scrape"
	"github.com/gpuscale/gpuscale/pkg/store"
)

// TestExporterTokenSentToExportersAlone: the exporters' reserved-lane
// token goes to the exporter DaemonSet's pods, never to an inference pod,
// which any tenant runs.
func TestExporterTokenSentToExportersAlone(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]string{}
	record := func(who string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[who] = r.Header.Get("Authorization")
			mu.Unlock()
			_, _ = w.Write([]byte("# empty\n"))
		})
	}
	_, exporterPort := serve(t, record("exporter"))
	_, tenantPort := serve(t, record("tenant"))
	g, err := New(Config{
		Pods:    podList{annotatedPod("tenant", tenantPort), exporterPod("exporter-x", "node-a")},
		Scraper: scrape.New(scrape.Config{Timeout: time.Second}), Store: store.New(10),
		Interval: time.Second, Registerer: prometheus.NewRegistry(), Discovery: exporterDiscovery(exporterPort),
		ExporterToken: "reserved-lane-token",
	})
	if err != nil {
		t.Fatal(err)
	}
	g.Cycle(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if got := seen["exporter"]; got != "Bearer reserved-lane-token" {
		t.Errorf("the exporter got Authorization %q", got)
	}
	if got, ok := seen["tenant"]; !ok || got != "" {
		t.Errorf("the tenant's pod got Authorization %q (scraped: %v)", got, ok)
	}
}
