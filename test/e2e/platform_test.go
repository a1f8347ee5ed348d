package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// TestHelmProductionInstall: the chart with production values (the PromQL
// source, runtime certificates, the KEDA scaler, monitors, rules,
// dashboards, NetworkPolicies, scale-down) renders the same bytes twice and
// installs with server-side apply on the real kube-apiserver, against the
// Prometheus Operator's CRDs; a second apply changes nothing, as a GitOps
// controller's sync must not. The APIServices, which the suite's own
// adapter holds, are applied as a server-side dry run.
func TestHelmProductionInstall(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	installMonitoringCRDs(t, root)
	ns := namespace(t, "e2e-helm-production")
	ctx := context.Background()
	if _, err := env.Cluster.Client().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "keda"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	args := []string{"-f", filepath.Join(root, chartDir, "ci/production-values.yaml"), "--api-versions", "monitoring.coreos.com/v1"}
	first := helmTemplate(t, helm, root, "gs-prod", ns, args...)
	if second := helmTemplate(t, helm, root, "gs-prod", ns, args...); !bytes.Equal(first, second) {
		t.Fatal("two renders of the production values differ")
	}
	objs := decodeObjects(t, first)
	var rest, apiServices []byte
	for _, o := range objs {
		b, err := yaml.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		doc := append([]byte("---\n"), b...)
		if o.GetKind() == "APIService" {
			apiServices = append(apiServices, doc...)
		} else {
			rest = append(rest, doc...)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for _, kind := range []string{"clusterrole", "clusterrolebinding", "validatingadmissionpolicy", "validatingadmissionpolicybinding"} {
			_, _ = env.Cluster.Kubectl(ctx, "delete", kind, "-l", "app.kubernetes.io/instance=gs-prod", "--ignore-not-found")
		}
		_, _ = env.Cluster.Kubectl(ctx, "delete", "role,rolebinding", "-n", "keda", "-l", "app.kubernetes.io/instance=gs-prod", "--ignore-not-found")
	})
	out := kubectlStdin(t, rest, "apply", "--server-side", "--field-manager=gitops", "-f", "-")
	if got := strings.Count(out, "serverside-applied"); got != len(objs)-len(byKind(objs, "APIService")) {
		t.Errorf("server-side apply applied %d of %d objects:\n%s", got, len(objs)-len(byKind(objs, "APIService")), out)
	}
	// What a GitOps controller checks before it syncs again: applying the
	// same render once more would change nothing (kubectl diff exits 0).
	if out, err := kubectlDiff(rest); err != nil {
		t.Errorf("the render differs from what it installed: %v\n%s", err, out)
	}
	out = kubectlStdin(t, apiServices, "apply", "--server-side", "--field-manager=gitops", "--force-conflicts", "--dry-run=server", "-f", "-")
	if got := strings.Count(out, "serverside-applied"); got != 3 {
		t.Errorf("server-side dry run accepted %d of 3 APIServices:\n%s", got, out)
	}
}

// kubectlDiff runs kubectl diff --server-side on manifest: an error when
// applying it would change a live object.
func kubectlDiff(manifest []byte) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Cluster
	cmd := exec.CommandContext(ctx, c.KubectlPath(), "--kubeconfig="+c.AdminKubeconfig(), "diff", "--server-side", "--field-manager=gitops", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(c.Dir(), "kubectl-cache"))
	cmd.Stdin = bytes.NewReader(manifest)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestHelmOverPlainManifests: a cluster installed from deploy/manifests
// (the suite's own environment is) moves to Helm as the chart README
// says: helm install over the objects fails without --take-ownership,
// naming them, and passes with it (a server-side dry run, so the suite's
// adapter keeps running).
func TestHelmOverPlainManifests(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	install := func(extra ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		args := append([]string{"install", "gpuscale", filepath.Join(root, chartDir), "--namespace", "gpuscale",
			"--set", "scaleDown.enabled=true", "--dry-run=server", "--kubeconfig", env.Cluster.AdminKubeconfig()}, extra...)
		out, err := exec.CommandContext(ctx, helm, args...).CombinedOutput()
		return string(out), err
	}
	out, err := install()
	if err == nil || !strings.Contains(out, "cannot be imported") {
		t.Errorf("helm install over the plain manifests: %v, want the ownership failure the README documents:\n%s", err, out)
	}
	if out, err := install("--take-ownership"); err != nil {
		t.Errorf("helm install --take-ownership over the plain manifests: %v\n%s", err, out)
	}
}

// ensureRole grants the suite adapter's ServiceAccount get/update on a
// Secret of ns, and create (for the test's KEDA credentials).
func ensureRole(t *testing.T, ns, secret string) {
	t.Helper()
	manifest := []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: e2e-keda-client, namespace: ` + ns + `}
rules:
  - {apiGroups: [""], resources: [secrets], verbs: [create]}
  - {apiGroups: [""], resources: [secrets], resourceNames: [` + secret + `], verbs: [get, update]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: e2e-keda-client, namespace: ` + ns + `}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: e2e-keda-client}
subjects: [{kind: ServiceAccount, name: gpuscale-adapter, namespace: gpuscale}]
`)
	kubectlStdin(t, manifest, "apply", "-f", "-")
	t.Cleanup(func() {
		_, _ = env.Cluster.Kubectl(context.Background(), "delete", "-n", ns, "role,rolebinding", "e2e-keda-client", "--ignore-not-found")
	})
}
