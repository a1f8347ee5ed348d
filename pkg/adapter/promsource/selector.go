package promsource

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// matcher is one PromQL label matcher.
type matcher struct{ label, op, value string }

var labelName = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

// matchers translates a metric selector into PromQL matchers with the
// embedded source's meaning: the selector is matched against the one label
// model_name, so a requirement on any other key sees an empty value, which
// is exactly what a matcher on a label the series lack sees.
func matchers(sel labels.Selector) ([]matcher, error) {
	if sel == nil || sel.Empty() {
		return nil, nil
	}
	reqs, _ := sel.Requirements()
	out := make([]matcher, 0, len(reqs))
	for _, r := range reqs {
		if !labelName.MatchString(r.Key()) {
			return nil, fmt.Errorf("metric selector key %q is not a Prometheus label name", r.Key())
		}
		vals := r.Values().UnsortedList()
		m := matcher{label: r.Key()}
		// A model is selected by its label value, in which '_' stands
		// for any character a label value cannot hold
		// (provider.ModelLabelValue).
		quote := regexp.QuoteMeta
		if r.Key() == provider.ModelLabel {
			quote = modelRegex
		}
		switch op := r.Operator(); {
		case (op == selection.Equals || op == selection.DoubleEquals) && quote(vals[0]) == regexp.QuoteMeta(vals[0]):
			m.op, m.value = "=", vals[0]
		case op == selection.NotEquals && quote(vals[0]) == regexp.QuoteMeta(vals[0]):
			m.op, m.value = "!=", vals[0]
		case op == selection.Equals || op == selection.DoubleEquals || op == selection.In:
			m.op, m.value = "=~", alternation(r.Values().List(), quote)
		case op == selection.NotEquals || op == selection.NotIn:
			m.op, m.value = "!~", alternation(r.Values().List(), quote)
		case op == selection.Exists:
			m.op = "!="
		case op == selection.DoesNotExist:
			m.op = "="
		default:
			return nil, fmt.Errorf("metric selector operator %q is not supported with --source=prometheus", r.Operator())
		}
		out = append(out, m)
	}
	return out, nil
}

// alternation is a regex matching exactly the given strings, each made a
// regex by quote.
func alternation(vals []string, quote func(string) string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = quote(v)
	}
	return strings.Join(q, "|")
}

// modelRegex matches the model names whose label value is v: each '_' any
// one character a label value cannot hold, or '_' itself.
func modelRegex(v string) string {
	parts := strings.Split(v, "_")
	for i, p := range parts {
		parts[i] = regexp.QuoteMeta(p)
	}
	return strings.Join(parts, `[^-.0-9A-Za-z]`)
}
