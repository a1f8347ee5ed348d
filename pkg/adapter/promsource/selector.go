package promsource

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
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
		switch r.Operator() {
		case selection.Equals, selection.DoubleEquals:
			m.op, m.value = "=", vals[0]
		case selection.NotEquals:
			m.op, m.value = "!=", vals[0]
		case selection.In:
			m.op, m.value = "=~", alternation(r.Values().List())
		case selection.NotIn:
			m.op, m.value = "!~", alternation(r.Values().List())
		case selection.Exists:
			m.op = "!="
		case selection.DoesNotExist:
			m.op = "="
		default:
			return nil, fmt.Errorf("metric selector operator %q is not supported with --source=prometheus", r.Operator())
		}
		out = append(out, m)
	}
	return out, nil
}

// alternation is a regex matching exactly the given strings.
func alternation(vals []string) string {
	q := make([]string, len(vals))
	for i, v := range vals {
		q[i] = regexp.QuoteMeta(v)
	}
	return strings.Join(q, "|")
}
