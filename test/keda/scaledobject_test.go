package keda

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// namespace creates a fresh namespace for one test and deletes it after.
func namespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := env.Cluster.Client().CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		env.World.SetRate(name, labels.Everything(), 0)
		_ = env.Cluster.Client().CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// scalerAuth creates the Secret and TriggerAuthentication "gpuscale" that
// KEDA's operator reads for the trigger: the CA of the adapter's serving
// certificate, and KEDA's client certificate, which the adapter's
// --keda-scaler-client-ca-file trusts; and the RoleBinding that lets that
// certificate's user read the namespace's metrics (docs/keda.md): the
// adapter authorizes every read with a SubjectAccessReview.
func scalerAuth(t *testing.T, ns string) {
	t.Helper()
	triggerAuth(t, ns)
	apply(t, ns, "keda-scaler-reader", `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: gpuscale-keda-scaler-reader
rules:
  - apiGroups: [custom.metrics.k8s.io, external.metrics.k8s.io]
    resources: ["*"]
    verbs: [get, list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: gpuscale-keda-scaler-reader
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: gpuscale-keda-scaler-reader}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: keda-operator}
`)
}

// triggerAuth is scalerAuth without the RoleBinding.
func triggerAuth(t *testing.T, ns string) {
	t.Helper()
	_, _, caPEM, err := env.Cluster.ServingCerts(devenv.AdapterName + "." + devenv.Namespace + ".svc")
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gpuscale-scaler-tls", Namespace: ns},
		Data:       map[string][]byte{"ca.crt": caPEM, "tls.crt": kedaPKI.CertPEM, "tls.key": kedaPKI.KeyPEM},
	}
	if _, err := env.Cluster.Client().CoreV1().Secrets(ns).Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apply(t, ns, "triggerauthentication", `apiVersion: keda.sh/v1alpha1
kind: TriggerAuthentication
metadata:
  name: gpuscale
spec:
  secretTargetRef:
    - {parameter: caCert, name: gpuscale-scaler-tls, key: ca.crt}
    - {parameter: tlsClientCert, name: gpuscale-scaler-tls, key: tls.crt}
    - {parameter: tlsClientKey, name: gpuscale-scaler-tls, key: tls.key}
`)
}

// scaledObject is a ScaledObject on Deployment name, 0 to maxReplicas, with
// one gpuscale trigger of the given metadata (scalerAddress added), read
// over mTLS and pushed through StreamIsActive (external-push).
func scaledObject(t *testing.T, ns, name string, maxReplicas int, metadata map[string]string) {
	t.Helper()
	var md strings.Builder
	fmt.Fprintf(&md, "        scalerAddress: %q\n", scalerAddr)
	for k, v := range metadata {
		fmt.Fprintf(&md, "        %s: %q\n", k, v)
	}
	apply(t, ns, "scaledobject-"+name, fmt.Sprintf(`apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata:
  name: %s
spec:
  scaleTargetRef: {name: %s}
  pollingInterval: 1
  cooldownPeriod: 5
  minReplicaCount: 0
  maxReplicaCount: %d
  advanced:
    horizontalPodAutoscalerConfig:
      behavior:
        scaleUp: {stabilizationWindowSeconds: 0}
        scaleDown: {stabilizationWindowSeconds: 0}
  triggers:
    - type: external-push
      authenticationRef: {name: gpuscale}
      metadata:
%s`, name, name, maxReplicas, md.String()))
}

func apply(t *testing.T, ns, name, yaml string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := env.Cluster.Kubectl(context.Background(), "apply", "-n", ns, "-f", path); err != nil {
		t.Fatalf("kubectl apply %s: %v: %s", name, err, out)
	}
}

func deploy(t *testing.T, ns, name string, replicas int32) labels.Selector {
	t.Helper()
	d := devenv.InferenceDeployment(ns, name, replicas, nil)
	if _, err := env.Cluster.Client().AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return labelsOf(d)
}

func labelsOf(d *appsv1.Deployment) labels.Selector {
	return labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
}

// replicas is the Deployment's ready replicas and its spec's.
func replicas(ctx context.Context, ns, name string) (ready, want int32) {
	d, err := env.Cluster.Client().AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil || d.Spec.Replicas == nil {
		return -1, -1
	}
	return d.Status.ReadyReplicas, *d.Spec.Replicas
}

// TestKEDAObjectTrigger: a ScaledObject whose gpuscale trigger reads the
// Deployment's inference_queue_depth (an Object value) scales it from 1
// to at least 2 under load and to 0 once idle, through KEDA's operator,
// KEDA's metrics API server and the real HPA controller.
func TestKEDAObjectTrigger(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "keda-object")
	scalerAuth(t, ns)
	sel := deploy(t, ns, "llm", 1)
	testenv.WaitFor(t, 60*time.Second, "1 ready replica", func(ctx context.Context) (bool, error) {
		r, _ := replicas(ctx, ns, "llm")
		return r == 1, nil
	})
	env.World.SetRate(ns, sel, 45) // about three replicas' capacity: the queue grows
	// KEDA scales a new ScaledObject's workload to zero at its first check
	// when the trigger is not active (initialCooldownPeriod 0), and a
	// trigger with no value yet is not: hand the Deployment to KEDA once
	// the adapter serves a queue for it, or the replica it would scrape is
	// gone before the first scrape.
	path := "/apis/custom.metrics.k8s.io/v1beta2/namespaces/" + ns + "/deployments.apps/llm/inference_queue_depth"
	testenv.WaitFor(t, 60*time.Second, "the adapter to serve a queue for the Deployment", func(ctx context.Context) (bool, error) {
		out, err := env.Cluster.Kubectl(ctx, "get", "--raw", path)
		if err != nil {
			return false, nil
		}
		var list struct {
			Items []struct {
				Value resource.Quantity `json:"value"`
			} `json:"items"`
		}
		return json.Unmarshal(out, &list) == nil && len(list.Items) == 1 && list.Items[0].Value.Sign() > 0, nil
	})
	scaledObject(t, ns, "llm", 3, map[string]string{"signal": "inference_queue_depth", "object": "deployment/llm", "target": "5"})
	testenv.WaitFor(t, 90*time.Second, "KEDA's HPA to scale to at least 2", func(ctx context.Context) (bool, error) {
		r, _ := replicas(ctx, ns, "llm")
		return r >= 2, nil
	})
	env.World.SetRate(ns, sel, 0)
	took := testenv.WaitFor(t, 90*time.Second, "KEDA to scale the idle Deployment to 0", func(ctx context.Context) (bool, error) {
		_, want := replicas(ctx, ns, "llm")
		return want == 0, nil
	})
	t.Logf("idle -> 0 replicas in %v (cooldownPeriod 5s)", took.Round(100*time.Millisecond))
}

// TestKEDAWrongMetadata: a trigger naming a signal gpuscale does not serve
// is refused with the gRPC error naming it. KEDA v2.21.0's external scaler
// logs GetMetricSpec's error in the operator's log and marks the
// ScaledObject not Ready (ScaledObjectCheckFailed: no metric specs), so
// both are asserted.
func TestKEDAWrongMetadata(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "keda-wrong")
	scalerAuth(t, ns)
	deploy(t, ns, "llm", 1)
	scaledObject(t, ns, "llm", 2, map[string]string{"signal": "gpu_temperature", "object": "deployment/llm", "target": "5"})
	testenv.WaitFor(t, 60*time.Second, "the ScaledObject to be refused (Ready False, ScaledObjectCheckFailed)", func(ctx context.Context) (bool, error) {
		out, err := env.Cluster.Kubectl(ctx, "get", "scaledobject", "llm", "-n", ns, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}`)
		return err == nil && strings.TrimSpace(string(out)) == "False ScaledObjectCheckFailed", nil
	})
	want := `"namespace":"` + ns + `","name":"llm","error":"rpc error: code = NotFound desc = signal \"gpu_temperature\" is not served by gpuscale`
	testenv.WaitFor(t, 30*time.Second, "KEDA's operator to log the scaler's gRPC error", func(context.Context) (bool, error) {
		b, err := os.ReadFile(kedaRun.OperatorLog())
		return err == nil && strings.Contains(string(b), want), nil
	})
}

// TestKEDANamespaceNotAuthorized: in a namespace where no RoleBinding lets
// KEDA's client certificate read the metrics APIs, the scaler refuses the
// trigger with PermissionDenied, which KEDA logs and reports on the
// ScaledObject, as for wrong metadata.
func TestKEDANamespaceNotAuthorized(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "keda-unbound")
	triggerAuth(t, ns)
	deploy(t, ns, "llm", 1)
	scaledObject(t, ns, "llm", 2, map[string]string{"signal": "inference_queue_depth", "object": "deployment/llm", "target": "5"})
	testenv.WaitFor(t, 60*time.Second, "the ScaledObject to be refused (Ready False, ScaledObjectCheckFailed)", func(ctx context.Context) (bool, error) {
		out, err := env.Cluster.Kubectl(ctx, "get", "scaledobject", "llm", "-n", ns, "-o",
			`jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}`)
		return err == nil && strings.TrimSpace(string(out)) == "False ScaledObjectCheckFailed", nil
	})
	want := `"namespace":"` + ns + `","name":"llm","error":"rpc error: code = PermissionDenied desc = user \"keda-operator\" may not get custom.metrics.k8s.io deployments.apps/llm/inference_queue_depth in namespace ` + ns
	testenv.WaitFor(t, 30*time.Second, "KEDA's operator to log the scaler's refusal", func(context.Context) (bool, error) {
		b, err := os.ReadFile(kedaRun.OperatorLog())
		return err == nil && strings.Contains(string(b), want), nil
	})
}

// TestKEDAExamplesServerDryRun: deploy/examples/keda are valid against the
// real API with KEDA's CRDs.
func TestKEDAExamplesServerDryRun(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "keda-examples")
	files, err := filepath.Glob("../../deploy/examples/keda/*.yaml")
	if err != nil || len(files) < 3 {
		t.Fatalf("examples: %v %v", files, err)
	}
	args := []string{"apply", "--dry-run=server", "-n", ns}
	for _, f := range files {
		args = append(args, "-f", f)
	}
	if out, err := env.Cluster.Kubectl(context.Background(), args...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}
