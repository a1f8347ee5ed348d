package dashboards

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

var promqlParser = parser.NewParser(parser.Options{})

// grafanaVar matches Grafana's variable syntaxes: $name, ${name},
// ${name:format} and [[name]].
var grafanaVar = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::[^}]*)?\}|\$([A-Za-z_][A-Za-z0-9_]*)|\[\[([A-Za-z_][A-Za-z0-9_]*)\]\]`)

// builtinVars are Grafana's own variables, replaced by values of their type.
var builtinVars = map[string]string{
	"__rate_interval": "5m",
	"__interval":      "1m",
	"__range":         "1h",
	"__interval_ms":   "60000",
	"__range_s":       "3600",
	"__range_ms":      "3600000",
}

// substitute replaces Grafana variables with values that keep the query
// valid PromQL (dashboard variables with userValue), and returns the
// dashboard variables it referred to.
func substitute(q, userValue string) (string, []string) {
	var refs []string
	out := grafanaVar.ReplaceAllStringFunc(q, func(m string) string {
		sub := grafanaVar.FindStringSubmatch(m)
		name := sub[1] + sub[2] + sub[3]
		if v, ok := builtinVars[name]; ok {
			return v
		}
		refs = append(refs, name)
		return userValue
	})
	return out, refs
}

// metricNames parses a PromQL query and returns the metric name of every
// vector selector in it. A selector without a literal name (a regular
// expression on __name__) is an error: its names cannot be checked.
func metricNames(expr string) ([]string, error) {
	ast, err := promqlParser.ParseExpr(expr)
	if err != nil {
		return nil, err
	}
	var names []string
	var errs []error
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		name := vs.Name
		if name == "" {
			for _, m := range vs.LabelMatchers {
				if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
		}
		if name == "" {
			errs = append(errs, fmt.Errorf("selector %s has no literal metric name", vs))
			return nil
		}
		names = append(names, name)
		return nil
	})
	return names, errors.Join(errs...)
}

// check parses one query (after Grafana substitution) and reports every
// metric name the catalog does not know.
func (c catalog) check(query string) (refs []string, err error) {
	expr, refs := substitute(query, "placeholder")
	names, err := metricNames(expr)
	if err != nil {
		return refs, fmt.Errorf("%q: %w", query, err)
	}
	var unknown []string
	for _, n := range names {
		if !c.known(n) {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return refs, fmt.Errorf("%q uses %s, which gpuscale neither exports nor lists as standard (renamed? see catalog_test.go)",
			query, strings.Join(unknown, ", "))
	}
	return refs, nil
}

func TestCheck(t *testing.T) {
	c := newCatalog()
	tests := []struct {
		name, query string
		ok          bool
		refs        []string
	}{
		{"exporter gauge", `avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL{Hostname=~"$node"})`, true, []string{"node"}},
		{"histogram buckets", `histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{model_name=~"${model}"}[$__rate_interval])))`, true, []string{"model"}},
		{"own histogram count", `rate(gpuscale_adapter_scrape_cycle_duration_seconds_count[5m])`, true, nil},
		{"kube-state-metrics", `kube_horizontalpodautoscaler_status_desired_replicas{namespace="[[namespace]]"}`, true, []string{"namespace"}},
		{"__name__ equality", `{__name__="DCGM_FI_DEV_FB_USED"}`, true, nil},
		{"renamed exporter metric", `DCGM_FI_DEV_GPU_UTILIZATION`, false, nil},
		{"renamed own metric", `gpuscale_adapter_metric_requests`, false, nil},
		{"bucket of a gauge", `vllm:num_requests_waiting_bucket`, false, nil},
		{"unknown on one side", `DCGM_FI_DEV_GPU_UTIL / on() group_left() vllm:num_requests_queued`, false, nil},
		{"regex name", `{__name__=~"DCGM_.*"}`, false, nil},
		{"not PromQL", `sum(DCGM_FI_DEV_GPU_UTIL`, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			refs, err := c.check(tt.query)
			if (err == nil) != tt.ok {
				t.Fatalf("check(%q) = %v, want ok=%v", tt.query, err, tt.ok)
			}
			if tt.ok && strings.Join(refs, ",") != strings.Join(tt.refs, ",") {
				t.Errorf("variables = %v, want %v", refs, tt.refs)
			}
		})
	}
}
