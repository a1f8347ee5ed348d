package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

const chartDir = "deploy/helm/gpuscale"

// TestHelmChart renders the chart with default and with non-default values
// and applies every render to the real kube-apiserver with a server-side
// dry run, so each object is validated by the API that would store it
// (schemas, immutable fields, admission). The Prometheus Operator CRDs are
// not installed here, so ServiceMonitors and PrometheusRules must stay out
// of every render unless the API is declared.
func TestHelmChart(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	allOn := filepath.Join(root, chartDir, "ci/all-on-values.yaml")
	cases := []struct {
		name, release string
		args          []string
		want, absent  []string // kinds
		check         func(t *testing.T, objs []*unstructured.Unstructured)
		// renderOnly skips the dry run: applied over the suite's own
		// APIServices, which hold a caBundle, insecureSkipTLSVerify would
		// be refused for holding both.
		renderOnly bool
	}{
		{
			name: "defaults", release: "gpuscale",
			want: []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Service", "Deployment", "DaemonSet", "APIService"},
			// No Secret: the adapter makes its certificates and the
			// exporters' reserved-lane token at runtime.
			absent: []string{"PodDisruptionBudget", "Secret", "ServiceMonitor", "PrometheusRule", "Namespace", "ValidatingAdmissionPolicy", "NetworkPolicy"},
			check:  checkRuntimeTLS,
		},
		{
			// The unverified certificate is there only when asked for twice.
			name: "self-signed opt-in", release: "gs-self-signed",
			args:       []string{"--set", "adapter.tls.source=selfSigned", "--set", "apiService.insecureSkipTLSVerify=true"},
			want:       []string{"APIService", "Deployment"},
			renderOnly: true,
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range byKind(objs, "APIService") {
					if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); !skip {
						t.Errorf("APIService %s does not skip verification though asked to", o.GetName())
					}
				}
			},
		},
		{
			// Two replicas, scale-down on, caBundle set, monitors asked for.
			name: "all on", release: "gs-all-on", args: []string{"-f", allOn},
			want:   []string{"PodDisruptionBudget", "Role", "RoleBinding", "APIService", "Deployment", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "NetworkPolicy"},
			absent: []string{"ServiceMonitor", "PrometheusRule"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range byKind(objs, "APIService") {
					if ca, _, _ := unstructured.NestedString(o.Object, "spec", "caBundle"); ca == "" {
						t.Errorf("APIService %s has no caBundle", o.GetName())
					}
				}
				var roles []string
				for _, o := range byKind(objs, "ClusterRole") {
					roles = append(roles, strings.TrimPrefix(o.GetName(), "gs-all-on-gpuscale"))
				}
				slices.Sort(roles)
				if want := []string{"-adapter:reader", "-adapter:scale-down", ":keda-scaler-reader", ":metrics-reader"}; !slices.Equal(roles, want) {
					t.Errorf("ClusterRoles %q, want %q", roles, want)
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ns := namespace(t, "e2e-helm-"+strings.ReplaceAll(tc.name, " ", "-"))
			manifest := helmTemplate(t, helm, root, tc.release, ns, tc.args...)
			objs := decodeObjects(t, manifest)
			for _, k := range tc.want {
				if len(byKind(objs, k)) == 0 {
					t.Errorf("no %s rendered", k)
				}
			}
			for _, k := range tc.absent {
				if len(byKind(objs, k)) > 0 {
					t.Errorf("%s rendered, want none", k)
				}
			}
			if tc.check != nil {
				tc.check(t, objs)
			}
			if tc.renderOnly {
				return
			}
			out := kubectlStdin(t, manifest, "apply", "--dry-run=server", "-f", "-")
			if got := strings.Count(out, "(server dry run)"); got != len(objs) {
				t.Errorf("server dry run accepted %d of %d objects:\n%s", got, len(objs), out)
			}
		})
	}
}

// checkRuntimeTLS: by default the adapter keeps its own certificate
// (--certs-secret): the render holds no certificate, every APIService
// verifies the adapter (no insecureSkipTLSVerify) with a caBundle the
// adapter writes, so none is rendered, and the adapter may write it.
func checkRuntimeTLS(t *testing.T, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, s := range byKind(objs, "Secret") {
		data, _, _ := unstructured.NestedMap(s.Object, "data")
		for _, k := range []string{"tls.crt", "tls.key", "ca.crt"} {
			if _, ok := data[k]; ok {
				t.Errorf("Secret %s renders %s: the adapter makes its certificates", s.GetName(), k)
			}
		}
	}
	for _, o := range byKind(objs, "APIService") {
		if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); skip {
			t.Errorf("APIService %s skips TLS verification by default", o.GetName())
		}
		if ca, ok, _ := unstructured.NestedString(o.Object, "spec", "caBundle"); ok {
			t.Errorf("APIService %s renders a caBundle (%d bytes): the adapter writes it", o.GetName(), len(ca))
		}
	}
	var args []string
	for _, d := range byKind(objs, "Deployment") {
		cs, _, _ := unstructured.NestedSlice(d.Object, "spec", "template", "spec", "containers")
		for _, a := range cs[0].(map[string]any)["args"].([]any) {
			args = append(args, a.(string))
		}
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--certs-secret=") }) {
		t.Errorf("adapter args %v: want --certs-secret", args)
	}
	var caBundleRole bool
	for _, r := range byKind(objs, "ClusterRole") {
		caBundleRole = caBundleRole || strings.HasSuffix(r.GetName(), ":ca-bundle")
	}
	if !caBundleRole {
		t.Error("no ClusterRole lets the adapter write its APIServices' caBundle")
	}
}

// TestHelmChartTLSChoices: the TLS modes that cannot be applied here (no
// cert-manager) or must not render at all.
func TestHelmChartTLSChoices(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	t.Run("cert-manager", func(t *testing.T) {
		objs := decodeObjects(t, helmTemplate(t, helm, root, "gs-cm", "gs-cm",
			"--set", "adapter.tls.source=certManager", "--api-versions", "cert-manager.io/v1"))
		if n := len(byKind(objs, "Certificate")); n != 2 {
			t.Errorf("%d Certificates, want the release's CA and the serving certificate", n)
		}
		for _, o := range byKind(objs, "APIService") {
			if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != "gs-cm/gs-cm-gpuscale-adapter-tls" {
				t.Errorf("APIService %s: inject-ca-from %q", o.GetName(), got)
			}
			if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); skip {
				t.Errorf("APIService %s skips verification", o.GetName())
			}
		}
	})
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"self-signed without the opt-in", []string{"--set", "adapter.tls.source=selfSigned"}, "cannot be verified"},
		{"cert-manager absent", []string{"--set", "adapter.tls.source=certManager"}, "needs cert-manager"},
		{"unknown source", []string{"--set", "adapter.tls.source=acme"}, "/adapter/tls/source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"template", "gs", filepath.Join(root, chartDir)}, tc.args...)
			out, err := exec.Command(helm, args...).CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("helm %v: err %v, want a failure saying %q:\n%s", tc.args, err, tc.want, out)
			}
		})
	}
}

// TestHelmChartMonitoringAPI: where the Prometheus Operator API is served
// and the values ask for them, the ServiceMonitors, the PodMonitor, the
// PrometheusRule and the dashboard ConfigMaps are rendered, and the real
// CRDs' schemas (the operator's pinned release, hack/prometheus-operator-crds.sh)
// accept them in a server-side dry run.
func TestHelmChartMonitoringAPI(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	installMonitoringCRDs(t, root)
	ns := namespace(t, "e2e-helm-monitoring")
	manifest := helmTemplate(t, helm, root, "gs-monitoring", ns,
		"-f", filepath.Join(root, chartDir, "ci/all-on-values.yaml"), "--api-versions", "monitoring.coreos.com/v1")
	objs := decodeObjects(t, manifest)
	for kind, want := range map[string]int{"ServiceMonitor": 2, "PodMonitor": 1, "PrometheusRule": 1, "ConfigMap": 3} {
		if n := len(byKind(objs, kind)); n != want {
			t.Errorf("%d %s rendered, want %d", n, kind, want)
		}
	}
	out := kubectlStdin(t, manifest, "apply", "--dry-run=server", "-f", "-")
	if got := strings.Count(out, "(server dry run)"); got != len(objs) {
		t.Errorf("server dry run accepted %d of %d objects:\n%s", got, len(objs), out)
	}
}

// installMonitoringCRDs creates the Prometheus Operator's ServiceMonitor,
// PodMonitor and PrometheusRule CRDs for the test, and deletes them after.
func installMonitoringCRDs(t *testing.T, root string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, filepath.Join(root, "hack/prometheus-operator-crds.sh")).Output()
	if err != nil {
		t.Fatalf("hack/prometheus-operator-crds.sh: %v", err)
	}
	dir := strings.TrimSpace(string(out))
	var args []string
	for _, kind := range []string{"servicemonitors", "podmonitors", "prometheusrules"} {
		args = append(args, "-f", filepath.Join(dir, "monitoring.coreos.com_"+kind+".yaml"))
	}
	// Server-side: the CRDs are too large for the last-applied annotation.
	if out, err := env.Cluster.Kubectl(ctx, append([]string{"apply", "--server-side"}, args...)...); err != nil {
		t.Fatalf("install the Prometheus Operator CRDs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = env.Cluster.Kubectl(ctx, append([]string{"delete", "--ignore-not-found"}, args...)...)
	})
	if err := env.Cluster.WaitCRDsEstablished(ctx, time.Minute,
		"servicemonitors.monitoring.coreos.com", "podmonitors.monitoring.coreos.com", "prometheusrules.monitoring.coreos.com"); err != nil {
		t.Fatal(err)
	}
}

// TestHelmNotes: the install notes' kubectl get --raw checks work against
// a real aggregation layer (the suite's adapter answers them).
func TestHelmNotes(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	ns := namespace(t, "e2e-helm-notes")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, helm, "install", "gs-notes", filepath.Join(root, chartDir), "--namespace", ns,
		// The suite's own APIServices already exist and route to its
		// adapter, not this release's: the chart refuses to replace them
		// unless told to, and Helm refuses to plan an install over objects
		// it did not create without --take-ownership (a dry run changes
		// nothing either way).
		"--set", "apiService.takeOver.custom.v1beta2=true", "--set", "apiService.takeOver.custom.v1beta1=true",
		"--set", "apiService.takeOver.external.v1beta1=true",
		// The KEDA scaler and monitors behind a NetworkPolicy: the notes
		// print the scalerAddress and warn that Prometheus is kept out.
		"--set", "kedaScaler.enabled=true", "--set", "kedaScaler.kedaNamespace="+ns, "--set", "networkPolicy.enabled=true", "--set", "serviceMonitor.enabled=true",
		"--dry-run=server", "--take-ownership", "--kubeconfig", env.Cluster.AdminKubeconfig())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm install --dry-run=server: %v\n%s", err, stderr.String())
	}
	_, notes, ok := strings.Cut(string(out), "\nNOTES:\n")
	if !ok {
		t.Fatalf("no NOTES in helm's output:\n%s", out)
	}
	// They name this release's objects, not the plain manifests'.
	for _, want := range []string{"gs-notes-gpuscale:metrics-reader", "scalerAddress: gs-notes-gpuscale-adapter." + ns + ".svc:6000",
		ns + "/gs-notes-gpuscale-keda-client", "WARNING: networkPolicy.enabled admits only"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, " gpuscale:metrics-reader") {
		t.Errorf("NOTES name gpuscale:metrics-reader, which release gs-notes does not create:\n%s", notes)
	}
	var raws int
	for _, line := range strings.Split(notes, "\n") {
		path, ok := strings.CutPrefix(strings.TrimSpace(line), "kubectl get --raw ")
		if !ok {
			continue
		}
		raws++
		// The namespace has no pods: the adapter's own NotFound for the
		// metric (not the aggregator's for an unknown path) is its answer.
		path = strings.ReplaceAll(strings.Trim(path, `"`), "<namespace>", ns)
		if out, err := env.Cluster.Kubectl(ctx, "get", "--raw", path); err != nil && !strings.Contains(err.Error(), "could not find the metric") {
			t.Errorf("NOTES: kubectl get --raw %s: %v\n%s", path, err, out)
		}
	}
	if raws < 4 {
		t.Errorf("NOTES hold %d kubectl get --raw checks, want the discovery, two Pods metrics and an external one:\n%s", raws, notes)
	}
}

// TestAPIServiceAvailabilityMetric: the metric GPUScaleAPIServiceUnavailable
// alerts on is the kube-apiserver's, with the APIService's name as label.
func TestAPIServiceAvailabilityMetric(t *testing.T) {
	needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := env.Cluster.Kubectl(ctx, "get", "--raw", "/metrics")
	if err != nil {
		t.Fatalf("kube-apiserver /metrics: %v", err)
	}
	for _, name := range []string{"v1beta2.custom.metrics.k8s.io", "v1beta1.external.metrics.k8s.io"} {
		if want := `aggregator_unavailable_apiservice{name="` + name + `"} 0`; !strings.Contains(string(out), want) {
			t.Errorf("kube-apiserver /metrics lacks %q", want)
		}
	}
}

// TestExampleHPAsServerDryRun: the example Deployment and HPAs in
// deploy/examples are valid against the real API.
func TestExampleHPAsServerDryRun(t *testing.T) {
	needEnv(t)
	root := rootDir(t)
	ns := namespace(t, "e2e-helm-examples")
	files, err := filepath.Glob(filepath.Join(root, "deploy/examples/*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	args := []string{"apply", "--dry-run=server", "-n", ns}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := env.Cluster.Kubectl(ctx, args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// chartTools returns the repository root and the pinned helm, built once
// (and cached) by hack/helm.sh.
func chartTools(t *testing.T) (root, helm string) {
	t.Helper()
	root = rootDir(t)
	return root, helmBinary(t, root)
}

func rootDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// helmBinary builds (once, cached) and returns the pinned helm.
func helmBinary(t *testing.T, root string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(root, "hack/helm.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hack/helm.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func helmTemplate(t *testing.T, helm, root, release, ns string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	full := append([]string{"template", release, filepath.Join(root, chartDir), "--namespace", ns}, args...)
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, helm, full...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %v: %v: %s", full, err, stderr.String())
	}
	return out
}

// kubectlStdin runs kubectl as cluster-admin with stdin, returning its
// standard output.
func kubectlStdin(t *testing.T, stdin []byte, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := env.Cluster
	cmd := exec.CommandContext(ctx, c.KubectlPath(), append([]string{"--kubeconfig=" + c.AdminKubeconfig()}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECACHEDIR="+filepath.Join(c.Dir(), "kubectl-cache"))
	cmd.Stdin = bytes.NewReader(stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %v: %v\n%s\n%s", args, err, stderr.String(), stdout.String())
	}
	return stdout.String()
}

func decodeObjects(t *testing.T, manifest []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var o unstructured.Unstructured
		if err := dec.Decode(&o.Object); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode render: %v", err)
		}
		if len(o.Object) > 0 {
			objs = append(objs, &o)
		}
	}
	if len(objs) == 0 {
		t.Fatal("empty render")
	}
	return objs
}

func byKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	return slices.DeleteFunc(slices.Clone(objs), func(o *unstructured.Unstructured) bool { return o.GetKind() != kind })
}
