package dashboards

import (
	"context"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
)

// TestAlertRulesFire evaluates the rule file in Prometheus's rule engine,
// once a minute for 20 minutes, over series shaped as the chart's
// ServiceMonitors and the kube-apiserver produce them: each failure the
// rules are for fires its alert, a healthy system fires none, and every
// summary renders from labels the series have.
func TestAlertRulesFire(t *testing.T) {
	const exporterTarget = `job="gpuscale-exporter", instance="10.0.0.1:9400", namespace="gpuscale", pod="gpuscale-exporter-x1", node="gpu-1"`
	cases := []struct {
		name   string
		series string
		want   map[string]string // alert -> summary
	}{
		{
			name: "healthy",
			series: `up{` + exporterTarget + `} 1x20
				up{job="gpuscale-adapter", instance="10.0.0.2:6443"} 1x20
				gpuscale_exporter_last_collection_success_timestamp_seconds{` + exporterTarget + `} 0+60x20
				aggregator_unavailable_apiservice{name="v1beta2.custom.metrics.k8s.io"} 0x20
				kube_daemonset_status_number_unavailable{namespace="gpuscale", daemonset="gpuscale-exporter"} 0x20`,
			want: map[string]string{},
		},
		{
			name: "exporter down",
			series: `up{` + exporterTarget + `} 1 0x19
				up{job="gpuscale-exporter", instance="10.0.0.3:9400", node="gpu-2"} 1x20`,
			want: map[string]string{"GPUScaleExporterDown": "The gpuscale exporter at 10.0.0.1:9400 on node gpu-1 cannot be scraped"},
		},
		{
			name:   "no exporter target at all",
			series: `up{job="gpuscale-adapter", instance="10.0.0.2:6443"} 1x20`,
			want:   map[string]string{"GPUScaleExporterAbsent": "Prometheus has no gpuscale exporter target"},
		},
		{
			name: "exporter up but not collecting",
			series: `up{` + exporterTarget + `} 1x20
				gpuscale_exporter_last_collection_success_timestamp_seconds{` + exporterTarget + `} 0x20`,
			want: map[string]string{"GPUScaleExporterStale": "The gpuscale exporter at 10.0.0.1:9400 on node gpu-1 has not collected for a minute"},
		},
		{
			name: "exporter pods unavailable on GPU nodes",
			series: `up{` + exporterTarget + `} 1x20
				kube_daemonset_status_number_unavailable{namespace="gpuscale", daemonset="prod-gpuscale-exporter"} 2x20
				kube_daemonset_status_number_unavailable{namespace="kube-system", daemonset="kube-proxy"} 3x20`,
			want: map[string]string{"GPUScaleExporterUnavailable": "2 GPU nodes have no available pod of gpuscale/prod-gpuscale-exporter"},
		},
		{
			name: "APIService unavailable",
			series: `up{` + exporterTarget + `} 1x20
				aggregator_unavailable_apiservice{name="v1beta2.custom.metrics.k8s.io", instance="a"} 1x20
				aggregator_unavailable_apiservice{name="v1beta2.custom.metrics.k8s.io", instance="b"} 1x20
				aggregator_unavailable_apiservice{name="v1beta1.external.metrics.k8s.io"} 0x20
				aggregator_unavailable_apiservice{name="v1beta1.metrics.k8s.io"} 1x20`,
			want: map[string]string{"GPUScaleAPIServiceUnavailable": "APIService v1beta2.custom.metrics.k8s.io is unavailable"},
		},
		// The GPU alerts, on each naming schema's series: 4.8 names with
		// Hostname (dcgm-exporter 4.8.2, gpuscale --dcgm-schema=4.8), 4.8
		// names with hostname (4.8.3, 4.8.4), 4.10 names with hostname.
		{
			name: "GPU unreadable, 4.10 labels",
			series: `up{` + exporterTarget + `} 1x20
				gpuscale_gpu_up{gpu="2", UUID="GPU-c", hostname="gpu-1"} 0x20`,
			want: map[string]string{"GPUScaleGPUUnreadable": "GPU 2 on gpu-1 cannot be read"},
		},
		{
			name: "uncorrectable ECC, shared GPU counted once",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0", UUID="GPU-a", Hostname="gpu-1", hostname="gpu-1", pod="a"} 0x15 1x5
				DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{gpu="0", UUID="GPU-a", Hostname="gpu-1", hostname="gpu-1", pod="b"} 0x15 1x5`,
			want: map[string]string{"GPUScaleGPUUncorrectableECC": "Uncorrectable ECC errors on GPU 0 of gpu-1"},
		},
		{
			name: "row remap failed, 4.8.4 labels",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu="1", UUID="GPU-b", hostname="gpu-2"} 1x20`,
			want: map[string]string{"GPUScaleGPURowRemapFailed": "Row remapping failed on GPU 1 of gpu-2"},
		},
		{
			name: "row remap failed, 4.10 name",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_ROW_REMAP_FAILED{gpu="1", UUID="GPU-b", hostname="gpu-2"} 1x20`,
			want: map[string]string{"GPUScaleGPURowRemapFailed": "Row remapping failed on GPU 1 of gpu-2"},
		},
		{
			name: "thermal throttling half the time",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_THERMAL_VIOLATION{gpu="3", UUID="GPU-d", Hostname="gpu-1"} 0+30000000000x20`,
			want: map[string]string{"GPUScaleGPUThermalThrottling": "GPU 3 of gpu-1 is throttled for heat"},
		},
		{
			name: "NVLink recoveries, 4.10 name",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL{gpu="0", UUID="GPU-a", hostname="gpu-3"} 0x15 2x5`,
			want: map[string]string{"GPUScaleNVLinkErrors": "NVLink errors on GPU 0 of gpu-3"},
		},
		{
			name: "fabric limited",
			series: `up{` + exporterTarget + `} 1x20
				DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY{gpu="0", UUID="GPU-a", hostname="gpu-3"} 3x20
				DCGM_FI_DEV_FABRIC_HEALTH_SUMMARY{gpu="1", UUID="GPU-b", hostname="gpu-3"} 1x20`,
			want: map[string]string{"GPUScaleGPUFabricUnhealthy": "The NVLink fabric of GPU 0 of gpu-3 is degraded"},
		},
		{
			name: "a field failing again and again, not one the GPU lacks",
			series: `up{` + exporterTarget + `} 1x20
				gpuscale_exporter_field_errors_total{` + exporterTarget + `, field="power_usage_w", code="ERROR_UNKNOWN"} 0+60x20
				gpuscale_exporter_field_errors_total{` + exporterTarget + `, field="memory_temp_c", code="ERROR_NOT_SUPPORTED"} 0+60x20`,
			want: map[string]string{"GPUScaleGPUFieldReadErrors": "The gpuscale exporter at 10.0.0.1:9400 cannot read power_usage_w (ERROR_UNKNOWN)"},
		},
		{
			name: "adapter down",
			series: `up{` + exporterTarget + `} 1x20
				up{job="gpuscale-adapter", instance="10.0.0.2:6443"} 0x20`,
			want: map[string]string{"GPUScaleAdapterDown": "The gpuscale adapter at 10.0.0.2:6443 cannot be scraped"},
		},
	}
	alerting := loadAlertingRules(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := promqltest.LoadedStorage(t, "load 1m\n"+tc.series)
			engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
			query := rules.EngineQueryFunc(engine, st)
			got := map[string]string{}
			for _, r := range alerting() {
				for i := 0; i <= 20; i++ {
					if _, err := r.Eval(context.Background(), 0, time.Unix(0, 0).Add(time.Duration(i)*time.Minute), query, nil, 0); err != nil {
						t.Fatalf("%s: %v", r.Name(), err)
					}
				}
				for _, a := range r.ActiveAlerts() {
					if a.State != rules.StateFiring {
						continue
					}
					summary := a.Annotations.Get("summary")
					if strings.Contains(summary+a.Annotations.Get("description"), "<no value>") {
						t.Errorf("%s %v: an annotation names a label the series lacks: %q", r.Name(), a.Labels, summary)
					}
					if prev, dup := got[r.Name()]; dup && prev != summary {
						t.Errorf("%s fired twice: %q and %q", r.Name(), prev, summary)
					}
					got[r.Name()] = summary
				}
			}
			for name, summary := range tc.want {
				if got[name] != summary {
					t.Errorf("%s: summary %q, want %q firing", name, got[name], summary)
				}
			}
			for name := range got {
				if _, ok := tc.want[name]; !ok {
					t.Errorf("%s fired too: %q", name, got[name])
				}
			}
		})
	}
}

// loadAlertingRules returns a function making fresh alerting rules from
// the rule file (each keeps its pending and firing state).
func loadAlertingRules(t *testing.T) func() []*rules.AlertingRule {
	t.Helper()
	content, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return parseAlertingRules(t, content)
}

// parseAlertingRules is loadAlertingRules for a rule file's content.
func parseAlertingRules(t *testing.T, content []byte) func() []*rules.AlertingRule {
	t.Helper()
	groups, errs := rulefmt.Parse(content, false, model.UTF8Validation, promqlParser, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	return func() []*rules.AlertingRule {
		var out []*rules.AlertingRule
		for _, g := range groups.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				expr, err := promqlParser.ParseExpr(r.Expr)
				if err != nil {
					t.Fatalf("%s: %v", r.Alert, err)
				}
				out = append(out, rules.NewAlertingRule(r.Alert, expr, time.Duration(r.For), time.Duration(r.KeepFiringFor),
					labels.FromMap(r.Labels), labels.FromMap(r.Annotations), labels.EmptyLabels(), "", true,
					slog.New(slog.NewTextHandler(io.Discard, nil))))
			}
		}
		if len(out) == 0 || !slices.ContainsFunc(out, func(r *rules.AlertingRule) bool { return r.Name() == "GPUScaleExporterDown" }) {
			t.Fatal("no exporter-down rule in the file")
		}
		return out
	}
}
