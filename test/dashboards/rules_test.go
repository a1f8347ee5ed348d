package dashboards

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
)

// The chart's PrometheusRule embeds this file; plain Prometheus loads it.
var rulesFile = filepath.Join(repoRoot, "deploy/helm/gpuscale/rules/gpuscale.rules.yaml")

func TestAlertRules(t *testing.T) {
	groups, errs := rulefmt.ParseFile(rulesFile, false, model.UTF8Validation, promqlParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	for _, err := range errs {
		t.Errorf("rule file: %v", err)
	}
	if groups == nil {
		t.FailNow()
	}
	c := newCatalog()
	n := 0
	for _, g := range groups.Groups {
		for _, r := range g.Rules {
			n++
			refs, err := c.check(r.Expr)
			if err != nil {
				t.Errorf("%s/%s: %v", g.Name, r.Alert+r.Record, err)
			}
			if len(refs) > 0 {
				t.Errorf("%s/%s uses Grafana-style variables %v", g.Name, r.Alert+r.Record, refs)
			}
			if r.Alert != "" && (r.Labels["severity"] == "" || r.Annotations["summary"] == "") {
				t.Errorf("%s/%s needs a severity label and a summary", g.Name, r.Alert)
			}
		}
	}
	if n == 0 {
		t.Error("no rules")
	}
}
