package dashboards

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/promql/promqltest"
	"github.com/prometheus/prometheus/rules"
	"go.yaml.in/yaml/v3"
)

// TestAPIServiceAlertFollowsTheRelease: the chart's PrometheusRule alerts
// on the APIServices the release registers and on no other, so KEDA's
// external metrics APIService being down does not page gpuscale's owners
// for a group gpuscale left to KEDA.
func TestAPIServiceAlertFollowsTheRelease(t *testing.T) {
	series := `aggregator_unavailable_apiservice{name="` + customV1beta2 + `"} 0x20
		aggregator_unavailable_apiservice{name="` + customV1beta1 + `"} 0x20
		aggregator_unavailable_apiservice{name="` + externalV1beta1 + `"} 0x20`
	down := func(name string) string {
		return `aggregator_unavailable_apiservice{name="` + name + `"} 1x20`
	}
	beside := func(off ...string) []string {
		var args []string
		for _, o := range off {
			args = append(args, "--set", "apiService."+o+"=false")
		}
		return args
	}
	cases := []struct {
		name  string
		args  []string
		down  string
		fires bool
	}{
		{"defaults, external down", nil, externalV1beta1, true},
		{"beside KEDA, KEDA's external down", beside("external.v1beta1"), externalV1beta1, false},
		{"beside KEDA, custom down", beside("external.v1beta1"), customV1beta2, true},
		{"beside prometheus-adapter, its custom down", beside("custom.v1beta2", "custom.v1beta1"), customV1beta1, false},
		{"nothing registered", beside("custom.v1beta2", "custom.v1beta1", "external.v1beta1"), customV1beta2, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--api-versions", "monitoring.coreos.com/v1", "--set", "prometheusRule.enabled=true"}, tc.args...)
			rulesObjs := ofKind(mustRender(t, args...), "PrometheusRule")
			if len(rulesObjs) != 1 {
				t.Fatalf("%d PrometheusRules rendered, want 1", len(rulesObjs))
			}
			content, err := yaml.Marshal(dig(rulesObjs[0], "spec"))
			if err != nil {
				t.Fatal(err)
			}
			st := promqltest.LoadedStorage(t, "load 1m\n"+series+"\n"+down(tc.down))
			engine := promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery)
			query := rules.EngineQueryFunc(engine, st)
			fired := false
			for _, r := range parseAlertingRules(t, content)() {
				if r.Name() != "GPUScaleAPIServiceUnavailable" {
					continue
				}
				for i := 0; i <= 20; i++ {
					if _, err := r.Eval(context.Background(), 0, time.Unix(0, 0).Add(time.Duration(i)*time.Minute), query, nil, 0); err != nil {
						t.Fatal(err)
					}
				}
				for _, a := range r.ActiveAlerts() {
					fired = fired || a.State == rules.StateFiring
				}
			}
			if fired != tc.fires {
				t.Errorf("GPUScaleAPIServiceUnavailable firing = %v with %s down, want %v", fired, tc.down, tc.fires)
			}
		})
	}
}
