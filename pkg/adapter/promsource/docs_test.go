package promsource

import (
	"maps"
	"os"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestDocsListDefaults keeps docs/metrics.md's listing of the default
// queries equal to DefaultQueries (the p50 and p99 TTFT templates are the
// p90 one and are not repeated there).
func TestDocsListDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	var listed QueryFile
	if err := yaml.UnmarshalStrict([]byte(yamlBlock(t, string(raw), "### Default queries")), &listed); err != nil {
		t.Fatal(err)
	}
	// The override example must load.
	example := yamlBlock(t, string(raw), "### Overriding queries")
	path := t.TempDir() + "/example.yaml"
	if err := os.WriteFile(path, []byte(example), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadQueries(path); err != nil {
		t.Errorf("the docs' override example: %v", err)
	}
	want := DefaultQueries()
	for _, m := range []map[string]string{want.Pods, want.Workload} {
		delete(m, provider.TTFTP50)
		delete(m, provider.TTFTP99)
		delete(m, provider.ITLP50)
		delete(m, provider.ITLP99)
	}
	for shape, pair := range map[string][2]map[string]string{
		ShapePods: {listed.Pods, want.Pods}, ShapeWorkload: {listed.Workload, want.Workload},
		ShapeNodes: {listed.Nodes, want.Nodes}, ShapeModels: {listed.Models, want.Models},
	} {
		if !maps.Equal(pair[0], pair[1]) {
			t.Errorf("docs list different %s queries:\n got %v\nwant %v", shape, pair[0], pair[1])
		}
	}
}

// yamlBlock is the first yaml code block after heading.
func yamlBlock(t *testing.T, doc, heading string) string {
	t.Helper()
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("docs/metrics.md has no %q", heading)
	}
	doc = doc[i:]
	start := strings.Index(doc, "```yaml\n")
	if start < 0 {
		t.Fatalf("no yaml block after %q", heading)
	}
	doc = doc[start+len("```yaml\n"):]
	end := strings.Index(doc, "```")
	if end < 0 {
		t.Fatalf("unterminated yaml block after %q", heading)
	}
	return doc[:end]
}
