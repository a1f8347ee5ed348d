package promsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

func TestLoadQueries(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	q, err := LoadQueries(write("ok.yaml", `
nodes:
  gpu_utilization: 'avg by (Hostname) (my_util{Hostname=~"{{.NodeRegex}}"})'
`))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := q.Render(ShapeNodes, provider.GPUUtilization, Params{NodeRegex: "n1"})
	if got != `avg by (Hostname) (my_util{Hostname=~"n1"})` {
		t.Errorf("override not used: %s", got)
	}
	if got, _ := q.Render(ShapePods, provider.GPUUtilization, Params{Namespace: "ml", PodRegex: "a"}); !strings.Contains(got, "DCGM_FI_DEV_GPU_UTIL") {
		t.Errorf("default lost: %s", got)
	}
	for _, tc := range []struct{ name, body, want string }{
		{"unknown metric", "pods:\n  nope: 'x'\n", `"nope" is not a metric`},
		{"not served with that shape", "nodes:\n  inference_queue_depth: 'x'\n", "not a metric served with this shape"},
		{"unknown shape", "pod:\n  gpu_utilization: 'x'\n", "unknown field"},
		{"template syntax", "pods:\n  gpu_utilization: '{{.Namespace'\n", "pods/gpu_utilization"},
		{"unknown field", "pods:\n  gpu_utilization: '{{.Pod}}'\n", "can't evaluate field Pod"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := LoadQueries(write(tc.name+".yaml", tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	if _, err := LoadQueries(filepath.Join(dir, "missing.yaml")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestModelMatch(t *testing.T) {
	for _, tc := range []struct{ sel, want, err string }{
		{"", "", ""},
		{"model_name=Llama-3.1-8B", `, model="Llama-3.1-8B"`, ""},
		{"model_name!=a", `, model!="a"`, ""},
		{"model_name in (a.b,c)", `, model=~"a\\.b|c"`, ""},
		{"model_name notin (a)", `, model!~"a"`, ""},
		{"model_name", `, model!=""`, ""},
		{"!model_name", `, model=""`, ""},
		{"team=x", `, team="x"`, ""},
		// A model is selected by its label value: '_' stands for a
		// character a label value cannot hold (meta-llama/Llama-3.1-8B).
		{"model_name=meta-llama_Llama-3.1-8B", `, model=~"meta-llama[^-.0-9A-Za-z]Llama-3\\.1-8B"`, ""},
		{"model_name!=a_b", `, model!~"a[^-.0-9A-Za-z]b"`, ""},
		{"model_name in (a_b,c)", `, model=~"a[^-.0-9A-Za-z]b|c"`, ""},
		{"team=a_b", `, team="a_b"`, ""},
		{"example.com/team=x", "", "not a Prometheus label name"},
		{"model_name>3", "", "not supported"},
	} {
		sel, err := labels.Parse(tc.sel)
		if err != nil {
			t.Fatalf("%q: %v", tc.sel, err)
		}
		m, err := matchers(sel)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err = %v, want %q", tc.sel, err, tc.err)
			}
			continue
		}
		if got := (Params{model: m}).ModelMatch("model"); err != nil || got != tc.want {
			t.Errorf("%q: got %s, %v; want %s", tc.sel, got, err, tc.want)
		}
	}
}
