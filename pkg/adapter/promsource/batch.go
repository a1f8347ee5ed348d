package promsource

import (
	"regexp"

	corev1 "k8s.io/api/core/v1"
)

func setPods(p *Params, re string) { p.PodRegex = re }

func podNames(pods []*corev1.Pod) []string {
	out := make([]string, len(pods))
	for i, p := range pods {
		out[i] = p.Name
	}
	return out
}

// batches renders the queries that together ask about names: one, unless
// the regex of all the names would make the query longer than
// MaxQueryBytes, and then as few as fit. The template may use the regex
// several times (queue depth: once per dialect), so the cost of a name is
// measured by rendering.
func (s *Source) batches(shape, metric string, p Params, names []string, set func(*Params, string)) ([]string, error) {
	if len(names) == 0 {
		return nil, nil // nothing asked, nothing to query
	}
	regex := func(ns []string) string {
		return escape(alternation(ns, regexp.QuoteMeta))
	}
	render := func(re string) (string, error) {
		set(&p, re)
		return s.render(shape, metric, p)
	}
	empty, err := render("")
	if err != nil {
		return nil, err
	}
	one, err := render("x")
	if err != nil {
		return nil, err
	}
	uses := len(one) - len(empty) // how many times the regex appears
	if uses == 0 || len(empty)+uses*len(regex(names)) <= s.cfg.MaxQueryBytes {
		q, err := render(regex(names))
		return []string{q}, err
	}
	budget := (s.cfg.MaxQueryBytes - len(empty)) / uses
	var (
		out   []string
		chunk []string
		size  int
	)
	flush := func() error {
		q, err := render(regex(chunk))
		out = append(out, q)
		chunk, size = chunk[:0], 0
		return err
	}
	for _, n := range names {
		cost := len(escape(regexp.QuoteMeta(n))) + 1 // and its |
		if len(chunk) > 0 && size+cost > budget {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		chunk = append(chunk, n)
		size += cost
	}
	if len(chunk) > 0 {
		if err := flush(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
