package discovery

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func pod(name string, lbl, ann map[string]string, mutate ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: lbl, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c",
			Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"},
	}
	for _, m := range mutate {
		m(p)
	}
	return p
}

func TestTargets(t *testing.T) {
	exporterSel := labels.SelectorFromSet(map[string]string{"app.kubernetes.io/name": "gpuscale-exporter"})
	cfg := Config{ExporterSelector: exporterSel, ExporterPort: 9400}
	now := metav1.NewTime(time.Now())
	cases := []struct {
		name    string
		pod     *corev1.Pod
		want    string // URL, "" for no target
		kind    Kind
		problem string
	}{
		{"exporter by selector", pod("exp", map[string]string{"app.kubernetes.io/name": "gpuscale-exporter"}, nil), "http://10.0.0.7:9400/metrics", KindExporter, ""},
		{"gpuscale annotations", pod("a", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "8000", AnnotationPath: "stats", AnnotationScheme: "https"}),
			"https://10.0.0.7:8000/stats", KindInference, ""},
		{"prometheus annotations", pod("b", nil, map[string]string{PrometheusScrape: "true", PrometheusPort: "9000"}), "http://10.0.0.7:9000/metrics", KindInference, ""},
		{"gpuscale wins over prometheus", pod("c", nil, map[string]string{AnnotationScrape: "true", PrometheusScrape: "true", PrometheusPort: "9000"}),
			"http://10.0.0.7:8080/metrics", KindInference, ""},
		{"container port fallback", pod("d", nil, map[string]string{AnnotationScrape: "true"}), "http://10.0.0.7:8080/metrics", KindInference, ""},
		{"not annotated", pod("e", nil, nil), "", 0, ""},
		{"scrape false", pod("f", nil, map[string]string{AnnotationScrape: "false"}), "", 0, ""},
		{"pending", pod("g", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }), "", 0, ""},
		{"no IP", pod("h", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.PodIP = "" }), "", 0, ""},
		{"terminating", pod("i", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.DeletionTimestamp = &now }), "", 0, ""},
		{"bad port", pod("j", nil, map[string]string{AnnotationScrape: "true", AnnotationPort: "http"}), "", 0, "not a port number"},
		{"bad scheme", pod("k", nil, map[string]string{AnnotationScrape: "true", AnnotationScheme: "ftp"}), "", 0, "neither http nor https"},
		{"no port at all", pod("l", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Spec.Containers[0].Ports = nil }), "", 0, "no container port"},
		{"IPv6", pod("m", nil, map[string]string{AnnotationScrape: "true"}, func(p *corev1.Pod) { p.Status.PodIP = "fd00::7" }), "http://[fd00::7]:8080/metrics", KindInference, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Targets([]*corev1.Pod{tc.pod}, cfg)
			if tc.problem != "" {
				if len(problems) != 1 || !strings.Contains(problems[0].Error(), tc.problem) || !strings.Contains(problems[0].Error(), "ns/"+tc.pod.Name) {
					t.Fatalf("problems = %v, want one naming the pod and %q", problems, tc.problem)
				}
				return
			}
			if len(problems) != 0 {
				t.Fatalf("unexpected problems: %v", problems)
			}
			if tc.want == "" {
				if len(got) != 0 {
					t.Fatalf("targets = %+v, want none", got)
				}
				return
			}
			if len(got) != 1 || got[0].URL != tc.want || got[0].Kind != tc.kind || got[0].Node != "n1" || got[0].Key() != "ns/"+tc.pod.Name {
				t.Fatalf("targets = %+v, want %s (%v)", got, tc.want, tc.kind)
			}
		})
	}
}
