package devenv

import (
	"strings"
	"testing"
)

// TestScrapeConfigPerServer: both servers scrape the same two file_sd
// jobs; only Prometheus gets refresh_interval, which VictoriaMetrics'
// strict parser refuses (it exited at start-up on it).
func TestScrapeConfigPerServer(t *testing.T) {
	for _, tc := range []struct {
		server      string
		wantRefresh bool
	}{
		{"prometheus", true},
		{"victoria-metrics", false},
	} {
		t.Run(tc.server, func(t *testing.T) {
			cfg := scrapeConfig("/d", tc.server, ServerOptions{})
			for _, want := range []string{"scrape_interval: 1s", `files: ["/d/exporters.json"]`, `files: ["/d/inference.json"]`} {
				if !strings.Contains(cfg, want) {
					t.Errorf("config lacks %q:\n%s", want, cfg)
				}
			}
			if got := strings.Count(cfg, "refresh_interval: 1s"); (got == 2) != tc.wantRefresh || (got != 0 && got != 2) {
				t.Errorf("refresh_interval %d times, want it on both jobs: %v\n%s", got, tc.wantRefresh, cfg)
			}
		})
	}
}
