package dashboards

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestChartExporterTelemetryOptions: the naming schema, the field
// selection, pod labels and UIDs, the reserved lane and the probes reach
// the exporter (and the lane's token the adapter) as the values say.
func TestChartExporterTelemetryOptions(t *testing.T) {
	objs := mustRender(t)
	ds := named(t, objs, "DaemonSet", "-exporter")
	a := args(t, ds)
	for _, want := range []string{"--dcgm-schema=4.8", "--xid-count-window=5m", "--web.max-requests=256",
		"--web.reserved-token-file=/etc/gpuscale/reserved-lane/token", "--web.reserved-max-requests=4"} {
		if !slices.Contains(a, want) {
			t.Errorf("default exporter args %v lack %s", a, want)
		}
	}
	if dig(ds, "spec", "template", "spec", "automountServiceAccountToken") != false {
		t.Error("the exporter gets an API token without pod labels or UIDs")
	}
	c := container(t, ds)
	if dig(c, "readinessProbe", "httpGet", "path") != "/readyz" || dig(c, "livenessProbe", "httpGet", "path") != "/healthz" {
		t.Errorf("probes: readiness %v, liveness %v", c["readinessProbe"], c["livenessProbe"])
	}
	// The token: the adapter's to make at runtime, an optional volume of
	// both pods, and the adapter may create that Secret and read it alone.
	if len(ofKind(objs, "Secret")) != 0 {
		t.Error("a Secret rendered by default: the adapter makes the reserved lane's token")
	}
	adapter := named(t, objs, "Deployment", "adapter")
	for _, want := range []string{"--exporter-token-file=/etc/gpuscale/exporter-token/token", "--exporter-token-secret=gpu/gs-gpuscale-exporter-token"} {
		if !slices.Contains(args(t, adapter), want) {
			t.Errorf("adapter args %v lack %s", args(t, adapter), want)
		}
	}
	checkTokenVolumes(t, "gs-gpuscale-exporter-token", ds, adapter)
	role := named(t, objs, "Role", "-adapter:exporter-token")
	if got, want := fmtAny(dig(role, "rules")), fmtAny([]any{
		map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "verbs": []any{"create"}},
		map[string]any{"apiGroups": []any{""}, "resources": []any{"secrets"}, "resourceNames": []any{"gs-gpuscale-exporter-token"}, "verbs": []any{"get"}},
	}); got != want {
		t.Errorf("exporter-token Role rules %s, want %s", got, want)
	}
	if rb := named(t, objs, "RoleBinding", "-adapter:exporter-token"); dig(rb, "roleRef", "name") != role.name() {
		t.Errorf("exporter-token RoleBinding binds %v", dig(rb, "roleRef"))
	}

	objs = mustRender(t, "--set", "exporter.config.dcgmSchema=4.10", "--set", "exporter.kubernetes.enablePodLabels=true",
		"--set", "exporter.config.fields={DCGM_FI_DEV_GPU_UTIL_RATIO,DCGM_FI_DEV_FB_USED}",
		"--set", "exporter.reservedLane.enabled=false")
	ds = named(t, objs, "DaemonSet", "-exporter")
	a = args(t, ds)
	for _, want := range []string{"--dcgm-schema=4.10", "--kubernetes-enable-pod-labels", "--collectors=/etc/gpuscale/collectors/collectors.csv"} {
		if !slices.Contains(a, want) {
			t.Errorf("exporter args %v lack %s", a, want)
		}
	}
	if slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--web.reserved") }) {
		t.Errorf("a reserved lane without reservedLane.enabled: %v", a)
	}
	if dig(ds, "spec", "template", "spec", "automountServiceAccountToken") != true {
		t.Error("pod labels without an API token")
	}
	csv, _ := dig(named(t, objs, "ConfigMap", "-exporter-collectors"), "data", "collectors.csv").(string)
	if !strings.Contains(csv, "DCGM_FI_DEV_GPU_UTIL_RATIO, gauge,") || !strings.Contains(csv, "DCGM_FI_DEV_FB_USED, gauge,") {
		t.Errorf("collectors.csv = %q", csv)
	}
	role = named(t, objs, "ClusterRole", "-exporter-pods")
	if rules := dig(role, "rules"); !strings.Contains(strings.ReplaceAll(fmtAny(rules), " ", ""), "pods") {
		t.Errorf("exporter role rules %v", rules)
	}
	if a := args(t, named(t, objs, "Deployment", "adapter")); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--exporter-token-") }) {
		t.Errorf("adapter args %v: a token no exporter holds", a)
	}
	if slices.ContainsFunc(ofKind(objs, "Role"), func(o object) bool { return strings.HasSuffix(o.name(), ":exporter-token") }) {
		t.Error("an exporter-token Role without a reserved lane")
	}
	// A token Secret of the user's: named in both pods, read alone; the
	// adapter neither makes it nor may create Secrets for it.
	objs = mustRender(t, "--set", "exporter.reservedLane.secretName=my-token")
	adapter = named(t, objs, "Deployment", "adapter")
	checkTokenVolumes(t, "my-token", named(t, objs, "DaemonSet", "-exporter"), adapter)
	if a := args(t, adapter); slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--exporter-token-secret") }) {
		t.Errorf("adapter args %v: the adapter makes a token beside exporter.reservedLane.secretName", a)
	}
	if slices.ContainsFunc(ofKind(objs, "Role"), func(o object) bool { return strings.HasSuffix(o.name(), ":exporter-token") }) {
		t.Error("an exporter-token Role beside exporter.reservedLane.secretName")
	}
	if _, err := render(t, "--set", "exporter.config.dcgmSchema=4.9"); err == nil || !strings.Contains(err.Error(), "dcgmSchema") {
		t.Errorf("dcgmSchema=4.9: %v, want the schema to refuse it", err)
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }

// checkTokenVolumes: each workload mounts the token's Secret as an
// optional volume, so that its pods start before the Secret exists.
func checkTokenVolumes(t *testing.T, secret string, workloads ...object) {
	t.Helper()
	for _, w := range workloads {
		var found bool
		vols, _ := dig(w, "spec", "template", "spec", "volumes").([]any)
		for _, v := range vols {
			if dig(v, "secret", "secretName") != secret {
				continue
			}
			found = true
			if dig(v, "secret", "optional") != true {
				t.Errorf("%s: the token's volume %v is not optional", w.name(), v)
			}
		}
		if !found {
			t.Errorf("%s: no volume of Secret %s among %v", w.name(), secret, vols)
		}
	}
}
