package dashboards

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var chartDir = filepath.Join(repoRoot, "deploy/helm/gpuscale")

// documentedKey matches the first cell of a row of the chart README's
// values table.
var documentedKey = regexp.MustCompile("(?m)^\\| `([A-Za-z0-9_.]+)` \\|")

// TestChartValuesDocumented: every value in values.yaml has a row in the
// chart README's table (itself, or a documented parent below the top
// level, such as adapter.resources), and every row names a real value.
func TestChartValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(b, &values); err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range documentedKey.FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	paths := map[string]bool{}
	var missing []string
	walkValues("", values, func(path string, leaf bool) {
		paths[path] = true
		if leaf && !documentedOrParent(path, documented) {
			missing = append(missing, path)
		}
	})
	sort.Strings(missing)
	for _, p := range missing {
		t.Errorf("value %s is not in the chart README's values table", p)
	}
	for k := range documented {
		if !paths[k] {
			t.Errorf("the chart README documents %s, which values.yaml does not have", k)
		}
	}
}

// walkValues calls f for every key path; leaf is true for non-map values.
func walkValues(prefix string, v any, f func(path string, leaf bool)) {
	m, ok := v.(map[string]any)
	if !ok || (len(m) == 0 && prefix != "") {
		f(prefix, true)
		return
	}
	if prefix != "" {
		f(prefix, false)
	}
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		walkValues(p, child, f)
	}
}

func documentedOrParent(path string, documented map[string]bool) bool {
	for p := path; strings.Contains(p, "."); p = p[:strings.LastIndex(p, ".")] {
		if documented[p] {
			return true
		}
	}
	return documented[path]
}
