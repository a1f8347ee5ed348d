package dashboards

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestChartReaderBindings: readers of the metrics APIs and clients of the
// KEDA scaler are bound cluster-wide only where asked, and otherwise in
// their own namespaces (RoleBindings there), to the chart's ClusterRoles;
// the scaler authorizes per namespace by default, and refuses to without
// client certificates.
func TestChartReaderBindings(t *testing.T) {
	objs := mustRender(t, "--set", "kedaScaler.enabled=true", "--set", "kedaScaler.clientCA.secretName=ca",
		"--set-json", `kedaScaler.readers={"clusterWide":[{"kind":"User","name":"keda-operator"}],"namespaced":{"team-a":[{"kind":"User","name":"keda:team-a"}]}}`,
		"--set-json", `metricsReaders.namespaced={"team-b":[{"kind":"Group","name":"team-b-devs"}]}`,
		"--set", "kedaScaler.limits.maxStreamsPerNamespace=64")
	type binding struct{ kind, namespace, role, subject string }
	var got []binding
	for _, o := range objs {
		if o.kind() != "RoleBinding" && o.kind() != "ClusterRoleBinding" {
			continue
		}
		role, _ := dig(o, "roleRef", "name").(string)
		if !strings.HasSuffix(role, ":metrics-reader") && !strings.HasSuffix(role, ":keda-scaler-reader") {
			continue
		}
		subjects, _ := dig(o, "subjects").([]any)
		for _, s := range subjects {
			ns, _ := dig(o, "metadata", "namespace").(string)
			got = append(got, binding{o.kind(), ns, role[strings.LastIndex(role, ":")+1:], fmt.Sprint(dig(s, "kind"), "/", dig(s, "name"))})
		}
	}
	want := []binding{
		{"ClusterRoleBinding", "", "keda-scaler-reader", "User/keda-operator"},
		{"RoleBinding", "team-a", "keda-scaler-reader", "User/keda:team-a"},
		{"ClusterRoleBinding", "", "metrics-reader", "ServiceAccount/horizontal-pod-autoscaler"},
		{"RoleBinding", "team-b", "metrics-reader", "Group/team-b-devs"},
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("no %+v among %+v", w, got)
		}
	}
	if len(got) != len(want) {
		t.Errorf("bindings %+v, want exactly %+v", got, want)
	}
	role := named(t, objs, "ClusterRole", ":keda-scaler-reader")
	rules := fmt.Sprint(dig(role, "rules"))
	for _, s := range []string{"custom.metrics.k8s.io", "external.metrics.k8s.io", "get", "list"} {
		if !strings.Contains(rules, s) {
			t.Errorf("keda-scaler-reader rules %s lack %s", rules, s)
		}
	}
	a := args(t, named(t, objs, "Deployment", "-adapter"))
	for _, w := range []string{"--keda-scaler-authorization=subjectaccessreview", "--keda-scaler-max-streams-per-namespace=64"} {
		if !slices.Contains(a, w) {
			t.Errorf("adapter args %v lack %s", a, w)
		}
	}
	for _, unwanted := range []string{"--keda-scaler-max-streams=0", "--keda-scaler-max-connections=0"} {
		if slices.Contains(a, unwanted) {
			t.Errorf("adapter args %v hold %s", a, unwanted)
		}
	}

	if _, err := render(t, "--set", "kedaScaler.enabled=true", "--set", "kedaScaler.clientAuth=false"); err == nil ||
		!strings.Contains(err.Error(), "kedaScaler.authorization=subjectaccessreview authorizes client certificates") {
		t.Errorf("the scaler without client certificates but authorizing them: %v", err)
	}
	for _, bad := range [][]string{{"--set", "kedaScaler.authorization=rbac"}, {"--set", "kedaScaler.limits.maxStreams=-1"},
		{"--set-json", `metricsReaders.namespaced={"team-a":[{"name":"x"}]}`}} {
		if _, err := render(t, bad...); err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
			t.Errorf("helm template %v: %v, want the schema to refuse it", bad, err)
		}
	}
	// The credentials the chart makes for KEDA (in KEDA's namespace, read by
	// one ClusterTriggerAuthentication) read every namespace: without that
	// binding the default install's KEDA would be refused everywhere.
	for _, src := range []string{"generate", "certManager"} {
		objs := mustRender(t, "--set", "kedaScaler.enabled=true", "--set", "adapter.tls.source="+src, "--api-versions", "cert-manager.io/v1")
		crb := named(t, objs, "ClusterRoleBinding", ":keda-scaler-reader")
		if s := fmt.Sprint(dig(crb, "subjects")); !strings.Contains(s, "kind:User") || !strings.Contains(s, "name:keda-operator") {
			t.Errorf("adapter.tls.source=%s: keda-scaler-reader bound to %s, want User keda-operator", src, s)
		}
	}
	objs = mustRender(t, "--set", "kedaScaler.enabled=true", "--set", "kedaScaler.clientAuth=false", "--set", "kedaScaler.authorization=none")
	if a := args(t, named(t, objs, "Deployment", "-adapter")); !slices.Contains(a, "--keda-scaler-authorization=none") {
		t.Errorf("adapter args %v", a)
	}
	for _, o := range objs {
		if strings.HasSuffix(o.name(), ":keda-scaler-reader") {
			t.Errorf("%s %s rendered without per-namespace authorization", o.kind(), o.name())
		}
	}
}
