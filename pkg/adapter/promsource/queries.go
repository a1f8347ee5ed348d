package promsource

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/template"

	"sigs.k8s.io/yaml"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// Shapes of query: what a template is asked and which label its result
// is keyed by.
const (
	ShapePods     = "pods"     // one value per pod, by the label pod
	ShapeWorkload = "workload" // TTFT only: one value for all the pods
	ShapeNodes    = "nodes"    // one value per node, by the label Hostname
	ShapeModels   = "models"   // one value per model, by the label model_name
)

// QueryFile is the --prometheus-queries file: per shape, a Go text/template
// per metric name. An entry replaces the compiled-in default of that
// metric and shape; absent entries keep the default.
type QueryFile struct {
	Pods     map[string]string `json:"pods,omitempty"`
	Workload map[string]string `json:"workload,omitempty"`
	Nodes    map[string]string `json:"nodes,omitempty"`
	Models   map[string]string `json:"models,omitempty"`
}

// Params is what a template sees. String fields are already escaped for a
// PromQL double-quoted string.
type Params struct {
	// Namespace of the pods (pods, workload and models shapes).
	Namespace string
	// PodRegex matches exactly the pods asked about: their names,
	// regexp.QuoteMeta'd, joined by |. PromQL anchors regexes.
	PodRegex string
	// NodeRegex is PodRegex for node names (nodes shape).
	NodeRegex string
	// Window is the TTFT window as a PromQL duration, e.g. 60s.
	Window string
	// Quantile is the TTFT quantile, e.g. 0.9.
	Quantile string
	model    []matcher
}

// ModelMatch renders the request's metric selector on model_name as
// PromQL matchers on label, each preceded by a comma, so a template can
// append it inside a selector's braces: vLLM's model is in model_name,
// Triton's in model. Empty when there is no selector.
func (p Params) ModelMatch(label string) string {
	var b strings.Builder
	for _, m := range p.model {
		name := m.label
		if name == provider.ModelLabel {
			name = label
		}
		fmt.Fprintf(&b, ", %s%s%s", name, m.op, quote(m.value))
	}
	return b.String()
}

// Queries holds the parsed templates, by shape and metric name.
type Queries struct {
	byShape map[string]map[string]*template.Template
	// over is the file's overrides, kept when the defaults are rebuilt
	// for the names a server has (forNames).
	over QueryFile
}

// LoadQueries returns the defaults overridden by the YAML file at path
// (none when path is empty). Every template is parsed and executed once
// here, so a broken file fails at start, not on the first HPA request.
func LoadQueries(path string) (*Queries, error) {
	var f QueryFile
	if path != "" {
		raw, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("prometheus queries: %w", err)
		}
		if err := yaml.UnmarshalStrict(raw, &f); err != nil {
			return nil, fmt.Errorf("prometheus queries %s: %w", path, err)
		}
	}
	return NewQueries(f)
}

// NewQueries returns the defaults overridden by f.
func NewQueries(f QueryFile) (*Queries, error) { return newQueries(DefaultQueries(), f) }

// forNames returns q with its defaults asking only for the series names
// the server has (names.keep); its overrides are kept as written.
func (q *Queries) forNames(has map[string]bool) (*Queries, error) {
	return newQueries(names{has: has}.defaults(), q.over)
}

func newQueries(def, f QueryFile) (*Queries, error) {
	q := &Queries{byShape: map[string]map[string]*template.Template{}, over: f}
	for _, s := range []struct {
		shape     string
		def, over map[string]string
	}{
		{ShapePods, def.Pods, f.Pods}, {ShapeWorkload, def.Workload, f.Workload},
		{ShapeNodes, def.Nodes, f.Nodes}, {ShapeModels, def.Models, f.Models},
	} {
		q.byShape[s.shape] = map[string]*template.Template{}
		for name := range s.over {
			if _, ok := s.def[name]; !ok {
				return nil, fmt.Errorf("prometheus queries: %s: %q is not a metric served with this shape", s.shape, name)
			}
		}
		for name, text := range s.def {
			if o, ok := s.over[name]; ok {
				text = o
			}
			t, err := parse(s.shape, name, text)
			if err != nil {
				return nil, err
			}
			q.byShape[s.shape][name] = t
		}
	}
	return q, nil
}

func parse(shape, name, text string) (*template.Template, error) {
	t, err := template.New(shape + "/" + name).Option("missingkey=error").Parse(text)
	if err != nil {
		return nil, fmt.Errorf("prometheus queries: %s/%s: %w", shape, name, err)
	}
	probe := Params{Namespace: "ns", PodRegex: "p", NodeRegex: "n", Window: "60s", Quantile: "0.9"}
	if err := t.Execute(&bytes.Buffer{}, probe); err != nil {
		return nil, fmt.Errorf("prometheus queries: %s/%s: %w", shape, name, err)
	}
	return t, nil
}

// template returns the template of a metric and shape, nil if none.
func (q *Queries) template(shape, metric string) *template.Template {
	return q.byShape[shape][metric]
}

// Render executes the template of a metric and shape.
func (q *Queries) Render(shape, metric string, p Params) (string, error) {
	t := q.template(shape, metric)
	if t == nil {
		return "", fmt.Errorf("no %s query for %s", shape, metric)
	}
	var b strings.Builder
	if err := t.Execute(&b, p); err != nil {
		return "", fmt.Errorf("render %s query for %s: %w", shape, metric, err)
	}
	return b.String(), nil
}

// quote returns s as a PromQL double-quoted string.
func quote(s string) string { return `"` + escape(s) + `"` }

// escape escapes s for the inside of a PromQL double-quoted string.
func escape(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
