package dashboards

import (
	"slices"
	"strings"
	"testing"
)

// Every APIService the chart can register.
const (
	customV1beta2   = "v1beta2.custom.metrics.k8s.io"
	customV1beta1   = "v1beta1.custom.metrics.k8s.io"
	externalV1beta1 = "v1beta1.external.metrics.k8s.io"
)

// TestChartAPIServiceToggles: each APIService is on or off on its own, and
// the metrics-reader ClusterRole grants only the groups the release
// registers, so a group left to another adapter (KEDA's external metrics)
// is not opened to gpuscale's readers. (The lookup of existing owners
// needs a cluster: test/e2e TestHelmAPIServiceOwners.)
func TestChartAPIServiceToggles(t *testing.T) {
	cases := []struct {
		name       string
		args       []string
		apiService []string
		readable   []string // the metrics-reader's apiGroups
	}{
		{"defaults", nil,
			[]string{customV1beta2, customV1beta1, externalV1beta1}, []string{"custom.metrics.k8s.io", "external.metrics.k8s.io"}},
		{"beside KEDA: external off", []string{"--set", "apiService.external.v1beta1=false"},
			[]string{customV1beta2, customV1beta1}, []string{"custom.metrics.k8s.io"}},
		{"beside prometheus-adapter: custom off", []string{"--set", "apiService.custom.v1beta2=false", "--set", "apiService.custom.v1beta1=false"},
			[]string{externalV1beta1}, []string{"external.metrics.k8s.io"}},
		{"custom v1beta1 only", []string{"--set", "apiService.custom.v1beta2=false"},
			[]string{customV1beta1, externalV1beta1}, []string{"custom.metrics.k8s.io", "external.metrics.k8s.io"}},
		{"custom v1beta2 only, no external", []string{"--set", "apiService.custom.v1beta1=false", "--set", "apiService.external.v1beta1=false"},
			[]string{customV1beta2}, []string{"custom.metrics.k8s.io"}},
		{"all off", []string{"--set", "apiService.custom.v1beta2=false", "--set", "apiService.custom.v1beta1=false", "--set", "apiService.external.v1beta1=false"},
			nil, nil},
		// With nothing to look up (helm template), takeOver changes nothing.
		{"take over", []string{"--set", "apiService.takeOver.external.v1beta1=true"},
			[]string{customV1beta2, customV1beta1, externalV1beta1}, []string{"custom.metrics.k8s.io", "external.metrics.k8s.io"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := mustRender(t, tc.args...)
			var got []string
			for _, o := range ofKind(objs, "APIService") {
				got = append(got, o.name())
				checkAPIService(t, o)
			}
			if !slices.Equal(got, tc.apiService) {
				t.Errorf("APIServices %v, want %v", got, tc.apiService)
			}
			if got := readableGroups(t, objs); !slices.Equal(got, tc.readable) {
				t.Errorf("metrics-reader grants %v, want %v", got, tc.readable)
			}
		})
	}
}

// checkAPIService: the object's name is its version and group, and it
// routes to this release's adapter; v1beta2 is the custom group's
// preferred version.
func checkAPIService(t *testing.T, o object) {
	t.Helper()
	version, _ := dig(o, "spec", "version").(string)
	group, _ := dig(o, "spec", "group").(string)
	if o.name() != version+"."+group {
		t.Errorf("APIService %s serves %s %s", o.name(), group, version)
	}
	if svc := dig(o, "spec", "service", "name"); svc != "gs-gpuscale-adapter" || dig(o, "spec", "service", "namespace") != "gpu" {
		t.Errorf("APIService %s routes to %v/%v, want gpu/gs-gpuscale-adapter", o.name(), dig(o, "spec", "service", "namespace"), svc)
	}
	want := 100
	if o.name() == customV1beta2 {
		want = 200
	}
	if got := dig(o, "spec", "versionPriority"); got != want {
		t.Errorf("APIService %s: versionPriority %v, want %d", o.name(), got, want)
	}
}

// readableGroups are the API groups the metrics-reader ClusterRole grants.
func readableGroups(t *testing.T, objs []object) []string {
	t.Helper()
	role := named(t, objs, "ClusterRole", ":metrics-reader")
	rules, _ := dig(role, "rules").([]any)
	var groups []string
	for _, r := range rules {
		for _, g := range dig(r, "apiGroups").([]any) {
			groups = append(groups, g.(string))
		}
		verbs := dig(r, "verbs").([]any)
		if len(verbs) != 2 || verbs[0] != "get" || verbs[1] != "list" {
			t.Errorf("metrics-reader verbs %v, want [get list]", verbs)
		}
	}
	return groups
}

// TestChartAPIServiceValuesRejected: the per-version values are checked by
// the schema; the boolean per group of earlier charts is refused with the
// path named rather than read as something else.
func TestChartAPIServiceValuesRejected(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a group as a boolean (earlier charts)", []string{"--set", "apiService.external=false"}, "/apiService/external"},
		{"a version the group does not have", []string{"--set", "apiService.external.v1beta2=true"}, "'/apiService/external': additional properties 'v1beta2'"},
		{"take over a version the group does not have", []string{"--set", "apiService.takeOver.external.v1=true"}, "'/apiService/takeOver/external': additional properties 'v1'"},
		{"take over not a boolean", []string{"--set-string", "apiService.takeOver.custom.v1beta1=yes"}, "/apiService/takeOver/custom/v1beta1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("helm template %v: %v, want a failure naming %q", tc.args, err, tc.want)
			}
		})
	}
}
