package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gpuscale/gpuscale/internal/harness/devenv"
	"github.com/gpuscale/gpuscale/internal/harness/testenv"
	"github.com/gpuscale/gpuscale/pkg/scaledown"
)

// TestScaleDownAdmissionPolicy: RBAC grants the adapter's ServiceAccount
// pods/patch on every pod (it cannot be narrowed to fields), and the
// ValidatingAdmissionPolicy in 15-scaledown-rbac.yaml narrows it to the
// scale-down controller's three annotations. Each change is sent as that
// ServiceAccount, as a compromised adapter would send it.
func TestScaleDownAdmissionPolicy(t *testing.T) {
	needEnv(t)
	ns := namespace(t, "e2e-admission")
	ctx := context.Background()
	admin := env.Cluster.Client()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant", Namespace: ns,
			Labels: map[string]string{"app": "llm"}, Annotations: map[string]string{"team": "a"}},
		Spec: corev1.PodSpec{
			// Never scheduled: the test is about the API object alone.
			SchedulingGates: []corev1.PodSchedulingGate{{Name: "example.com/hold"}},
			Containers:      []corev1.Container{{Name: "server", Image: "example.com/vllm"}},
		},
	}
	if _, err := admin.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	adapter := serviceAccountClient(t, devenv.Namespace, devenv.AdapterName)

	cases := []struct {
		name    string
		patch   string
		allowed bool
	}{
		{"deletion cost", `{"metadata":{"annotations":{"` + scaledown.DeletionCostAnnotation + `":"-5"}}}`, true},
		{"safe-to-evict and its marker", `{"metadata":{"annotations":{"` + scaledown.SafeToEvictAnnotation + `":"false","` + scaledown.ProtectedAnnotation + `":"true"}}}`, true},
		{"managed annotations removed", `{"metadata":{"annotations":{"` + scaledown.SafeToEvictAnnotation + `":null,"` + scaledown.ProtectedAnnotation + `":null}}}`, true},
		{"a label changed", `{"metadata":{"labels":{"app":"other"}}}`, false},
		{"a label added", `{"metadata":{"labels":{"role":"frontend"}}}`, false},
		{"another annotation changed", `{"metadata":{"annotations":{"team":"b"}}}`, false},
		{"another annotation removed", `{"metadata":{"annotations":{"team":null}}}`, false},
		{"another annotation added beside a managed one", `{"metadata":{"annotations":{"` + scaledown.DeletionCostAnnotation + `":"1","prometheus.io/scrape":"true"}}}`, false},
		{"a finalizer added", `{"metadata":{"finalizers":["example.com/hold"]}}`, false},
		{"the spec changed", `{"spec":{"activeDeadlineSeconds":5}}`, false},
	}
	// A new policy takes effect within seconds of its creation; wait for
	// the first refusal before judging every case.
	testenv.WaitFor(t, 30*time.Second, "the admission policy to refuse a label change by the adapter", func(ctx context.Context) (bool, error) {
		_, err := adapter.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"probe":"x"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil, nil
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := adapter.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
			switch {
			case tc.allowed && err != nil:
				t.Errorf("refused: %v", err)
			case !tc.allowed && err == nil:
				t.Errorf("allowed: the adapter's ServiceAccount changed more than its annotations")
			case !tc.allowed && !(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)):
				t.Errorf("refused for another reason than the policy: %v", err)
			case !tc.allowed && !strings.Contains(err.Error(), "gpuscale scale-down controller"):
				t.Errorf("refusal does not say why: %v", err)
			}
		})
	}
	// The policy binds the adapter alone: the same label change by an
	// administrator goes through.
	if _, err := admin.CoreV1().Pods(ns).Patch(ctx, pod.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"app":"other"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("an administrator's label change was refused: %v", err)
	}
}

// serviceAccountClient is a client authenticated as the ServiceAccount
// namespace/name, with a short-lived token.
func serviceAccountClient(t *testing.T, namespace, name string) kubernetes.Interface {
	t.Helper()
	ttl := int64(600)
	tok, err := env.Cluster.Client().CoreV1().ServiceAccounts(namespace).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &ttl}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	admin := env.Cluster.RESTConfig()
	cfg := &rest.Config{Host: admin.Host, BearerToken: tok.Status.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: admin.CAData, CAFile: admin.CAFile, ServerName: admin.ServerName}}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
