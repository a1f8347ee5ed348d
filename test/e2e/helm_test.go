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
	}{
		{
			name: "defaults", release: "gpuscale",
			want:   []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "RoleBinding", "Service", "Deployment", "DaemonSet", "APIService"},
			absent: []string{"PodDisruptionBudget", "Role", "ServiceMonitor", "PrometheusRule", "Namespace"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range byKind(objs, "APIService") {
					if skip, _, _ := unstructured.NestedBool(o.Object, "spec", "insecureSkipTLSVerify"); !skip {
						t.Errorf("APIService %s does not skip verification of the self-signed certificate", o.GetName())
					}
				}
			},
		},
		{
			// Two replicas, scale-down on, caBundle set, monitors asked for.
			name: "all on", release: "gs-all-on", args: []string{"-f", allOn},
			want:   []string{"PodDisruptionBudget", "Role", "RoleBinding", "APIService", "Deployment"},
			absent: []string{"ServiceMonitor", "PrometheusRule"},
			check: func(t *testing.T, objs []*unstructured.Unstructured) {
				for _, o := range byKind(objs, "APIService") {
					if ca, _, _ := unstructured.NestedString(o.Object, "spec", "caBundle"); ca == "" {
						t.Errorf("APIService %s has no caBundle", o.GetName())
					}
				}
				if n := len(byKind(objs, "ClusterRole")); n != 3 {
					t.Errorf("%d ClusterRoles, want reader, metrics-reader and scale-down", n)
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
			out := kubectlStdin(t, manifest, "apply", "--dry-run=server", "-f", "-")
			if got := strings.Count(out, "(server dry run)"); got != len(objs) {
				t.Errorf("server dry run accepted %d of %d objects:\n%s", got, len(objs), out)
			}
		})
	}
}

// TestHelmChartMonitoringAPI: where the Prometheus Operator API is served
// and the values ask for them, the ServiceMonitors and the PrometheusRule
// are rendered (the gate that keeps them out above is the API's presence).
func TestHelmChartMonitoringAPI(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	manifest := helmTemplate(t, helm, root, "gs-monitoring", "monitoring",
		"-f", filepath.Join(root, chartDir, "ci/all-on-values.yaml"), "--api-versions", "monitoring.coreos.com/v1")
	objs := decodeObjects(t, manifest)
	if n := len(byKind(objs, "ServiceMonitor")); n != 2 {
		t.Errorf("%d ServiceMonitors, want the exporter's and the adapter's", n)
	}
	if n := len(byKind(objs, "PrometheusRule")); n != 1 {
		t.Errorf("%d PrometheusRules, want 1", n)
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
