package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

var apiServiceGVR = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// The suite's APIServices, registered from deploy/manifests.
const (
	customV1beta2   = "v1beta2.custom.metrics.k8s.io"
	customV1beta1   = "v1beta1.custom.metrics.k8s.io"
	externalV1beta1 = "v1beta1.external.metrics.k8s.io"
)

// TestHelmAPIServiceOwners runs the real `helm install` and `helm upgrade`
// of the chart against the real kube-apiserver, where other adapters own
// APIServices: KEDA's v1beta1.external.metrics.k8s.io (as KEDA's chart
// registers it) and prometheus-adapter's v1beta1.custom.metrics.k8s.io.
// The chart must refuse to take either, naming the owner and the values
// that decide; install beside them with those groups off, leaving them
// untouched; take one over only when told; and upgrade its own release
// over its own APIServices. The suite's APIServices are restored after.
func TestHelmAPIServiceOwners(t *testing.T) {
	needEnv(t)
	root, helm := chartTools(t)
	ns := namespace(t, "e2e-coexist")
	apiServices, err := dynamic.NewForConfig(env.Cluster.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := apiServices.Resource(apiServiceGVR)
	restoreAPIServices(t, client)
	replaceAPIService(t, client, kedaAPIService())

	const release = "gs-coexist"
	run := helmRunner(t, helm, filepath.Join(root, chartDir), ns)
	// The suite's adapter keeps the custom APIServices; this release's
	// exporters would only add pods.
	customOff := []string{"--set", "apiService.custom.v1beta2=false", "--set", "apiService.custom.v1beta1=false", "--set", "exporter.enabled=false"}
	// A second release, beside prometheus-adapter.
	const second = "gs-coexist-custom"
	// Before the APIServices are restored (cleanups run last first).
	t.Cleanup(func() {
		_, _ = run("uninstall", release)
		_, _ = run("uninstall", second)
	})

	t.Run("KEDA's external APIService is refused", func(t *testing.T) {
		out, err := run(append([]string{"install", release, "--dry-run=server"}, customOff...)...)
		wantRefusal(t, out, err,
			"APIService "+externalV1beta1+" belongs to the Service keda/keda-operator-metrics-apiserver",
			"app.kubernetes.io/part-of=keda-operator", "app.kubernetes.io/name="+externalV1beta1, "Helm release keda/keda",
			"set apiService.external.v1beta1=false", "set apiService.takeOver.external.v1beta1=true", "--take-ownership", "--force-conflicts")
	})
	t.Run("every foreign APIService is named at once", func(t *testing.T) {
		out, err := run("install", release, "--dry-run=server", "--set", "exporter.enabled=false")
		wantRefusal(t, out, err,
			"APIService "+customV1beta2+" belongs to the Service gpuscale/gpuscale-adapter",
			"APIService "+customV1beta1+" belongs to the Service gpuscale/gpuscale-adapter",
			"APIService "+externalV1beta1+" belongs to the Service keda/keda-operator-metrics-apiserver")
	})

	keda := getAPIService(t, client, externalV1beta1)
	t.Run("beside KEDA with the external group off", func(t *testing.T) {
		out, err := run(append([]string{"install", release, "--set", "apiService.external.v1beta1=false"}, customOff...)...)
		if err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		// The notes name what is left to other adapters, and check none of it.
		_, notes, _ := strings.Cut(out, "\nNOTES:\n")
		if !strings.Contains(notes, "left to whichever adapter owns them") || !strings.Contains(notes, externalV1beta1) ||
			strings.Contains(notes, "get --raw") || strings.Contains(notes, "kubectl get apiservice") {
			t.Errorf("NOTES with every group off:\n%s", notes)
		}
		after := getAPIService(t, client, externalV1beta1)
		if after.GetResourceVersion() != keda.GetResourceVersion() {
			t.Errorf("KEDA's APIService changed (resourceVersion %s -> %s): %v", keda.GetResourceVersion(), after.GetResourceVersion(), after.Object["spec"])
		}
	})
	t.Run("helm upgrade refuses to take it over", func(t *testing.T) {
		// Helm adopts on upgrade without rewriting the object: the chart
		// says so instead of leaving it routing to KEDA.
		out, err := run(append([]string{"upgrade", release, "--set", "apiService.takeOver.external.v1beta1=true", "--take-ownership", "--force-conflicts"}, customOff...)...)
		wantRefusal(t, out, err, "cannot take it over on helm upgrade", "kubectl delete apiservice "+externalV1beta1)
		if after := getAPIService(t, client, externalV1beta1); after.GetResourceVersion() != keda.GetResourceVersion() {
			t.Errorf("KEDA's APIService changed: %v", after.Object)
		}
	})
	t.Run("helm install takes it over when told", func(t *testing.T) {
		if out, err := run("uninstall", release); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
		// With the chart's default the adapter writes the caBundle at
		// runtime (none runs here); a caBundle of the values' own shows that
		// the takeover rewrites the field.
		ownCA := base64.StdEncoding.EncodeToString([]byte("-----BEGIN CERTIFICATE-----\ngpuscale\n"))
		if out, err := run(append([]string{"install", release, "--set", "apiService.takeOver.external.v1beta1=true", "--take-ownership", "--force-conflicts",
			"--set", "adapter.tls.secretName=gpuscale-test-tls", "--set", "apiService.caBundle=" + ownCA}, customOff...)...); err != nil {
			t.Fatalf("helm install with the override: %v\n%s", err, out)
		}
		got := getAPIService(t, client, externalV1beta1)
		wantOwnedBy(t, got, ns, release)
		if ca, _, _ := unstructured.NestedString(got.Object, "spec", "caBundle"); ca != ownCA || ca == kedaCABundle {
			t.Errorf("the taken-over APIService kept KEDA's caBundle")
		}
	})
	t.Run("an upgrade keeps the release's own APIService", func(t *testing.T) {
		if out, err := run(append([]string{"upgrade", release, "--reuse-values"}, customOff...)...); err != nil {
			t.Fatalf("helm upgrade over its own APIService: %v\n%s", err, out)
		}
		wantOwnedBy(t, getAPIService(t, client, externalV1beta1), ns, release)
	})
	t.Run("a second version beside prometheus-adapter's is refused", func(t *testing.T) {
		// prometheus-adapter's chart registers v1beta1 alone; gpuscale's
		// v1beta2 beside it would become the group's preferred version.
		deleteAPIService(t, client, customV1beta2)
		replaceAPIService(t, client, prometheusAdapterAPIService())
		out, err := run("install", second, "--dry-run=server", "--set", "apiService.custom.v1beta1=false",
			"--set", "apiService.external.v1beta1=false", "--set", "exporter.enabled=false")
		wantRefusal(t, out, err,
			"APIService "+customV1beta1+" belongs to the Service monitoring/prometheus-adapter",
			"release=prometheus-adapter", "preferred version",
			"set apiService.custom.v1beta2=false", "apiService.takeOver.custom.v1beta1=true")
	})
	t.Run("v1beta2 beside prometheus-adapter's v1beta1 when told", func(t *testing.T) {
		// docs/migrating-from-prometheus-adapter.md's switch: v1beta2
		// becomes the group's preferred version, v1beta1 stays its owner's.
		before := getAPIService(t, client, customV1beta1)
		if out, err := run("install", second, "--set", "apiService.custom.v1beta1=false", "--set", "apiService.takeOver.custom.v1beta1=true",
			"--set", "apiService.external.v1beta1=false", "--set", "exporter.enabled=false"); err != nil {
			t.Fatalf("helm install: %v\n%s", err, out)
		}
		wantOwnedBy(t, getAPIService(t, client, customV1beta2), ns, second)
		if after := getAPIService(t, client, customV1beta1); after.GetResourceVersion() != before.GetResourceVersion() {
			t.Errorf("prometheus-adapter's APIService changed: %v", after.Object)
		}
		b, err := raw(context.Background(), "/apis/custom.metrics.k8s.io")
		if err != nil {
			t.Fatal(err)
		}
		var group metav1.APIGroup
		if err := json.Unmarshal(b, &group); err != nil {
			t.Fatal(err)
		}
		if group.PreferredVersion.Version != "v1beta2" {
			t.Errorf("custom.metrics.k8s.io prefers %q, want v1beta2 (gpuscale's)", group.PreferredVersion.Version)
		}
	})
	t.Run("prometheus-adapter's unverified APIService taken over", func(t *testing.T) {
		// The chart writes insecureSkipTLSVerify: false beside its
		// caBundle: the API refuses both at once, and a take-over keeps
		// every field the chart leaves out.
		if out, err := run("uninstall", second); err != nil {
			t.Fatalf("helm uninstall: %v\n%s", err, out)
		}
		if out, err := run("install", second, "--set", "apiService.takeOver.custom.v1beta1=true", "--take-ownership", "--force-conflicts",
			"--set", "apiService.external.v1beta1=false", "--set", "exporter.enabled=false"); err != nil {
			t.Fatalf("helm install with the override: %v\n%s", err, out)
		}
		for _, name := range []string{customV1beta2, customV1beta1} {
			got := getAPIService(t, client, name)
			wantOwnedBy(t, got, ns, second)
			if skip, _, _ := unstructured.NestedBool(got.Object, "spec", "insecureSkipTLSVerify"); skip {
				t.Errorf("APIService %s still skips TLS verification after the take-over", name)
			}
		}
	})
}

// helmRunner runs the pinned helm as cluster-admin in namespace ns, with
// helm's own state in a temporary directory, returning its output.
func helmRunner(t *testing.T, helm, chart, ns string) func(args ...string) (string, error) {
	home := t.TempDir()
	return func(args ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if args[0] == "install" || args[0] == "upgrade" {
			args = append([]string{args[0], args[1], chart}, args[2:]...)
		}
		cmd := exec.CommandContext(ctx, helm, append(args, "--namespace", ns, "--kubeconfig", env.Cluster.AdminKubeconfig())...)
		cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
}

// wantRefusal: helm failed, and its message holds every want.
func wantRefusal(t *testing.T, out string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("helm succeeded, want a refusal:\n%s", out)
	}
	// The refusal is the chart's, not Helm's own ownership check.
	if !strings.Contains(out, "See docs/coexistence.md") {
		t.Errorf("not the chart's refusal:\n%s", out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("helm's message lacks %q:\n%s", w, out)
		}
	}
}

// wantOwnedBy: the APIService routes to the release's adapter and Helm
// records it as the release's.
func wantOwnedBy(t *testing.T, o *unstructured.Unstructured, ns, release string) {
	t.Helper()
	svcNS, _, _ := unstructured.NestedString(o.Object, "spec", "service", "namespace")
	svc, _, _ := unstructured.NestedString(o.Object, "spec", "service", "name")
	if svcNS != ns || svc != release+"-gpuscale-adapter" {
		t.Errorf("APIService %s routes to %s/%s, want %s/%s-gpuscale-adapter", o.GetName(), svcNS, svc, ns, release)
	}
	if a := o.GetAnnotations(); a["meta.helm.sh/release-name"] != release || a["meta.helm.sh/release-namespace"] != ns {
		t.Errorf("APIService %s: Helm annotations %v, want release %s/%s", o.GetName(), a, ns, release)
	}
}

// kedaCABundle stands for the CA KEDA's operator injects into its
// APIService (a placeholder PEM, base64-encoded).
const kedaCABundle = "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg=="

// kedaAPIService is v1beta1.external.metrics.k8s.io as KEDA's Helm chart
// (kedacore/charts, keda/templates/metrics-server/apiservice.yaml)
// registers it in the namespace keda, with the caBundle its operator's
// certificate rotation adds.
func kedaAPIService() *unstructured.Unstructured {
	o := apiService(externalV1beta1, map[string]any{
		"app.kubernetes.io/name": externalV1beta1, "app.kubernetes.io/part-of": "keda-operator",
		"app.kubernetes.io/component": "operator", "app.kubernetes.io/instance": "keda",
		"app.kubernetes.io/managed-by": "Helm", "app.kubernetes.io/version": "2.21.0", "helm.sh/chart": "keda-2.21.0",
	}, map[string]any{"meta.helm.sh/release-name": "keda", "meta.helm.sh/release-namespace": "keda"},
		map[string]any{"namespace": "keda", "name": "keda-operator-metrics-apiserver", "port": int64(443)})
	_ = unstructured.SetNestedField(o.Object, kedaCABundle, "spec", "caBundle")
	return o
}

// prometheusAdapterAPIService is v1beta1.custom.metrics.k8s.io as the
// prometheus-community chart registers it by default (its older
// app/chart/release/heritage labels, TLS unverified).
func prometheusAdapterAPIService() *unstructured.Unstructured {
	o := apiService(customV1beta1, map[string]any{
		"app": "prometheus-adapter", "chart": "prometheus-adapter-5.2.0", "release": "prometheus-adapter", "heritage": "Helm",
	}, map[string]any{"meta.helm.sh/release-name": "prometheus-adapter", "meta.helm.sh/release-namespace": "monitoring"},
		map[string]any{"namespace": "monitoring", "name": "prometheus-adapter", "port": int64(443)})
	_ = unstructured.SetNestedField(o.Object, true, "spec", "insecureSkipTLSVerify")
	return o
}

func apiService(name string, labels, annotations, service map[string]any) *unstructured.Unstructured {
	version, group, _ := strings.Cut(name, ".")
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
		"metadata": map[string]any{"name": name, "labels": labels, "annotations": annotations},
		"spec": map[string]any{
			"service": service, "group": group, "version": version,
			"groupPriorityMinimum": int64(100), "versionPriority": int64(100),
		},
	}}
}

func getAPIService(t *testing.T, client dynamic.NamespaceableResourceInterface, name string) *unstructured.Unstructured {
	t.Helper()
	o, err := client.Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get APIService %s: %v", name, err)
	}
	return o
}

func deleteAPIService(t *testing.T, client dynamic.NamespaceableResourceInterface, name string) {
	t.Helper()
	if err := client.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatalf("delete APIService %s: %v", name, err)
	}
}

// replaceAPIService puts o in place of the APIService of its name.
func replaceAPIService(t *testing.T, client dynamic.NamespaceableResourceInterface, o *unstructured.Unstructured) {
	t.Helper()
	deleteAPIService(t, client, o.GetName())
	if _, err := client.Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create APIService %s: %v", o.GetName(), err)
	}
}

// restoreAPIServices puts the suite's APIServices back as they are now
// when the test ends, and waits for the aggregator to route to the
// adapter again, so the tests after it find the metrics APIs.
func restoreAPIServices(t *testing.T, client dynamic.NamespaceableResourceInterface) {
	t.Helper()
	var saved []*unstructured.Unstructured
	for _, name := range []string{customV1beta2, customV1beta1, externalV1beta1} {
		o := getAPIService(t, client, name)
		unstructured.RemoveNestedField(o.Object, "status")
		for _, f := range []string{"resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"} {
			unstructured.RemoveNestedField(o.Object, "metadata", f)
		}
		saved = append(saved, o)
	}
	t.Cleanup(func() {
		for _, o := range saved {
			replaceAPIService(t, client, o)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := env.WaitAPIAvailable(ctx, 90*time.Second); err != nil {
			t.Errorf("the suite's metrics APIs after restoring its APIServices: %v", err)
		}
	})
}
