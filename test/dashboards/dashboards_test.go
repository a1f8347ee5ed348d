package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// requiredVars are the filters each dashboard must offer, besides the
// datasource variable every one has. A new dashboard needs an entry.
var requiredVars = map[string][]string{
	"gpu-fleet.json":     {"node", "namespace", "model"},
	"inference-slo.json": {"namespace", "model"},
	"autoscaling.json":   {"namespace", "node"},
}

// dsVariable is how every panel, target and variable names its datasource.
const dsVariable = "${datasource}"

// The parts of Grafana's dashboard JSON model the checks read.
type (
	dashboard struct {
		UID           string  `json:"uid"`
		Title         string  `json:"title"`
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []variable `json:"list"`
		} `json:"templating"`
	}
	panel struct {
		ID         int            `json:"id"`
		Type       string         `json:"type"`
		Title      string         `json:"title"`
		Datasource *datasourceRef `json:"datasource"`
		Targets    []target       `json:"targets"`
		Panels     []panel        `json:"panels"` // a collapsed row's
	}
	target struct {
		RefID      string         `json:"refId"`
		Expr       string         `json:"expr"`
		Datasource *datasourceRef `json:"datasource"`
	}
	datasourceRef struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	}
	variable struct {
		Name       string          `json:"name"`
		Type       string          `json:"type"`
		Query      json.RawMessage `json:"query"`
		Datasource *datasourceRef  `json:"datasource"`
	}
)

func loadDashboards(t *testing.T) map[string]dashboard {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot, "dashboards", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]dashboard{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d dashboard
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = d
	}
	if len(out) == 0 {
		t.Fatal("no dashboards in dashboards/")
	}
	return out
}

// flatten returns every panel, rows' children included.
func flatten(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, flatten(p.Panels)...)
	}
	return out
}

func TestDashboardQueriesUseKnownMetrics(t *testing.T) {
	c := newCatalog()
	for file, d := range loadDashboards(t) {
		t.Run(file, func(t *testing.T) {
			defined := map[string]bool{}
			for _, v := range d.Templating.List {
				defined[v.Name] = true
			}
			undefined := map[string]bool{}
			note := func(refs []string) {
				for _, r := range refs {
					if !defined[r] {
						undefined[r] = true
					}
				}
			}
			queries := 0
			for _, p := range flatten(d.Panels) {
				for _, tg := range p.Targets {
					queries++
					refs, err := c.check(tg.Expr)
					note(refs)
					if err != nil {
						t.Errorf("panel %q, target %s: %v", p.Title, tg.RefID, err)
					}
				}
			}
			for _, v := range d.Templating.List {
				if v.Type != "query" {
					continue
				}
				q, err := variableQuery(v.Query)
				if err == nil {
					var refs []string
					refs, err = c.check(q)
					note(refs)
				}
				if err != nil {
					t.Errorf("variable %s: %v", v.Name, err)
				}
			}
			if queries == 0 {
				t.Error("no queries")
			}
			for r := range undefined {
				t.Errorf("a query uses $%s, which the dashboard does not define", r)
			}
		})
	}
}

var (
	labelValuesQuery = regexp.MustCompile(`^label_values\((.+),\s*[A-Za-z_][A-Za-z0-9_]*\)$`)
	queryResultQuery = regexp.MustCompile(`^query_result\((.+)\)$`)
)

// variableQuery returns the PromQL inside a Prometheus query variable:
// label_values(selector, label) or query_result(expr).
func variableQuery(raw json.RawMessage) (string, error) {
	var q string
	if err := json.Unmarshal(raw, &q); err != nil {
		var obj struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("query is neither a string nor an object: %s", raw)
		}
		q = obj.Query
	}
	q = strings.TrimSpace(q)
	for _, re := range []*regexp.Regexp{labelValuesQuery, queryResultQuery} {
		if m := re.FindStringSubmatch(q); m != nil {
			return m[1], nil
		}
	}
	return "", fmt.Errorf("query %q is not label_values(selector, label) or query_result(expr): its metric names cannot be checked", q)
}

func TestDashboardStructure(t *testing.T) {
	dashboards := loadDashboards(t)
	uids := map[string]string{}
	for file, d := range dashboards {
		t.Run(file, func(t *testing.T) {
			required, ok := requiredVars[file]
			if !ok {
				t.Fatalf("no required variables listed for %s in requiredVars", file)
			}
			if d.UID == "" || d.Title == "" || d.SchemaVersion == 0 {
				t.Errorf("uid %q, title %q, schemaVersion %d: all are required", d.UID, d.Title, d.SchemaVersion)
			}
			if other, dup := uids[d.UID]; dup {
				t.Errorf("uid %q is also %s's", d.UID, other)
			}
			uids[d.UID] = file
			checkVariables(t, d.Templating.List, required)
			checkPanels(t, flatten(d.Panels))
		})
	}
	for file := range requiredVars {
		if _, ok := dashboards[file]; !ok {
			t.Errorf("dashboards/%s is missing", file)
		}
	}
}

func checkVariables(t *testing.T, vars []variable, required []string) {
	t.Helper()
	byName := map[string]variable{}
	for _, v := range vars {
		byName[v.Name] = v
	}
	ds, ok := byName["datasource"]
	if !ok || ds.Type != "datasource" || string(ds.Query) != `"prometheus"` {
		t.Errorf("no Prometheus datasource variable named datasource (got %+v)", ds)
	}
	var missing []string
	for _, name := range required {
		if _, ok := byName[name]; !ok {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("variables %v are missing", missing)
	}
	for _, v := range vars {
		if v.Type == "query" && (v.Datasource == nil || v.Datasource.UID != dsVariable) {
			t.Errorf("variable %s does not query %s", v.Name, dsVariable)
		}
	}
}

func checkPanels(t *testing.T, panels []panel) {
	t.Helper()
	ids := map[int]bool{}
	for _, p := range panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.Type == "row" || p.Type == "text" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no queries", p.Title)
		}
		if p.Datasource == nil || p.Datasource.UID != dsVariable {
			t.Errorf("panel %q does not use %s", p.Title, dsVariable)
		}
		for _, tg := range p.Targets {
			if tg.Datasource == nil || tg.Datasource.UID != dsVariable {
				t.Errorf("panel %q target %s does not use %s", p.Title, tg.RefID, dsVariable)
			}
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("panel %q target %s has no expression", p.Title, tg.RefID)
			}
		}
	}
}
