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
	secret := named(t, objs, "Secret", "-exporter-token")
	if tok, _ := dig(secret, "data", "token").(string); len(tok) < 40 {
		t.Errorf("reserved-lane token %q", tok)
	}
	adapter := named(t, objs, "Deployment", "adapter")
	if !slices.Contains(args(t, adapter), "--exporter-token-file=/etc/gpuscale/exporter-token/token") {
		t.Errorf("adapter args %v lack the exporter token", args(t, adapter))
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
	role := named(t, objs, "ClusterRole", "-exporter-pods")
	if rules := dig(role, "rules"); !strings.Contains(strings.ReplaceAll(fmtAny(rules), " ", ""), "pods") {
		t.Errorf("exporter role rules %v", rules)
	}
	if slices.Contains(args(t, named(t, objs, "Deployment", "adapter")), "--exporter-token-file=/etc/gpuscale/exporter-token/token") {
		t.Error("the adapter is given a token no exporter holds")
	}
	// A token Secret of the user's: named in both pods, none generated.
	objs = mustRender(t, "--set", "exporter.reservedLane.secretName=my-token")
	if len(slices.DeleteFunc(ofKind(objs, "Secret"), func(o object) bool { return !strings.HasSuffix(o.name(), "-exporter-token") })) != 0 {
		t.Error("a token Secret generated beside exporter.reservedLane.secretName")
	}
	for _, w := range []object{named(t, objs, "DaemonSet", "-exporter"), named(t, objs, "Deployment", "adapter")} {
		if vols := fmtAny(dig(w, "spec", "template", "spec", "volumes")); !strings.Contains(vols, "secretName:my-token") {
			t.Errorf("%s volumes %s do not name the user's token Secret", w.name(), vols)
		}
	}
	if _, err := render(t, "--set", "exporter.config.dcgmSchema=4.9"); err == nil || !strings.Contains(err.Error(), "dcgmSchema") {
		t.Errorf("dcgmSchema=4.9: %v, want the schema to refuse it", err)
	}
}

func fmtAny(v any) string { return fmt.Sprint(v) }
