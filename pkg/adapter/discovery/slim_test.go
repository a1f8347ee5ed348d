package discovery

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gpuscale/gpuscale/pkg/kube/podslim"
)

// cluttered adds what the API server returns and Targets never reads.
func cluttered(p *corev1.Pod) {
	p.UID = types.UID("uid-" + p.Name)
	p.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}
	if p.Annotations == nil {
		p.Annotations = map[string]string{}
	}
	p.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{}"
	p.Spec.Containers = append([]corev1.Container{{Name: "init-like", Image: "busybox", Env: []corev1.EnvVar{{Name: "A", Value: "b"}}}}, p.Spec.Containers...)
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	p.Status.HostIP = "10.1.1.1"
}

// TestTargetsOnSlimPods: Targets finds the same targets and problems in
// pods slimmed by KeepPodFields as in the full pods.
func TestTargetsOnSlimPods(t *testing.T) {
	now := metav1.NewTime(time.Now())
	annotated := map[string]string{AnnotationScrape: "true"}
	pods := []*corev1.Pod{
		pod("exp", exporterLabels, nil, ownedByExporter),
		pod("exp-host", exporterLabels, nil, ownedByExporter, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		pod("fake-exp", exporterLabels, annotated, controlledBy("apps/v1", "DaemonSet", "imposter")),
		pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "8000", AnnotationPath: "stats", AnnotationScheme: "https"}),
		pod("b", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "9000", PrometheusPath: "/m"}),
		pod("port-fallback", nil, annotated),
		pod("no-port", nil, annotated, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }),
		pod("pending", nil, annotated, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }),
		pod("terminating", nil, annotated, func(p *corev1.Pod) { p.DeletionTimestamp = &now }),
		pod("host", nil, annotated, func(p *corev1.Pod) { p.Spec.HostNetwork = true }),
		pod("bad-port", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "http"}),
		pod("v6", nil, annotated, func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }),
		pod("plain", nil, nil),
	}
	for i := range 3 {
		pods = append(pods, pod(fmt.Sprintf("capped-%d", i), nil, annotated))
	}
	for _, p := range pods {
		cluttered(p)
	}
	slim := make([]*corev1.Pod, len(pods))
	for i, p := range pods {
		slim[i] = podslim.Slim(p, KeepPodFields)
	}
	configs := map[string]func(*Config){
		"default":          func(*Config) {},
		"host network":     func(c *Config) { c.ScrapeHostNetwork = true },
		"any namespace":    func(c *Config) { c.ExporterNamespace = AnyNamespace },
		"namespace capped": func(c *Config) { c.MaxTargetsPerNamespace = 2 },
	}
	for name, set := range configs {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig()
			set(&cfg)
			wantTargets, wantProblems := Targets(pods, cfg)
			gotTargets, gotProblems := Targets(slim, cfg)
			if len(wantTargets) == 0 || len(wantProblems) == 0 {
				t.Fatalf("%d targets, %d problems from the full pods: the fixture should give both", len(wantTargets), len(wantProblems))
			}
			if !slices.Equal(gotTargets, wantTargets) {
				t.Errorf("slim pods give targets\n%+v\nfull pods\n%+v", gotTargets, wantTargets)
			}
			if got, want := errorStrings(gotProblems), errorStrings(wantProblems); !slices.Equal(got, want) {
				t.Errorf("slim pods give problems\n%q\nfull pods\n%q", got, want)
			}
		})
	}
}

func errorStrings(errs []error) []string {
	out := make([]string, len(errs))
	for i, err := range errs {
		out[i] = err.Error()
	}
	return out
}
