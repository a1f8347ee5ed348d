package dashboards

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// hpa is the part of an autoscaling/v2 HorizontalPodAutoscaler that names
// metrics.
type hpa struct {
	Kind string `yaml:"kind"`
	Spec struct {
		Metrics []struct {
			Type     string    `yaml:"type"`
			Pods     *metricOf `yaml:"pods"`
			Object   *metricOf `yaml:"object"`
			External *metricOf `yaml:"external"`
		} `yaml:"metrics"`
	} `yaml:"spec"`
}

type metricOf struct {
	Metric struct {
		Name string `yaml:"name"`
	} `yaml:"metric"`
}

// TestExampleHPAsNameServedMetrics checks that every metric an example HPA
// names is one the adapter serves (pkg/provider's exported names).
func TestExampleHPAsNameServedMetrics(t *testing.T) {
	served := stringLiterals(t, "pkg/provider")
	files, err := filepath.Glob(filepath.Join(repoRoot, "deploy/examples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	hpas := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		for {
			var h hpa
			if err := dec.Decode(&h); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if h.Kind != "HorizontalPodAutoscaler" {
				continue
			}
			hpas++
			for _, m := range h.Spec.Metrics {
				for _, src := range []*metricOf{m.Pods, m.Object, m.External} {
					if src != nil && !served[src.Metric.Name] {
						t.Errorf("%s: %s metric %q is not one the adapter serves", filepath.Base(f), m.Type, src.Metric.Name)
					}
				}
			}
		}
	}
	if hpas < 4 {
		t.Errorf("%d example HPAs, want at least 4", hpas)
	}
}
