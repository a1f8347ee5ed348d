package promsource

import (
	"math"
	"strconv"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// The inference servers' defaults are written from the dialect table
// (pkg/signal/dialect), as the embedded source reads it: each engine's families of
// a signal in the table's order, each pod's value from the first present
// ("or on (namespace, pod)"), selected on the engine's model label and
// scaled to the signal's unit. Engines whose families share a unit are
// aggregated together; one in another unit (Triton's milliseconds) gets an
// aggregation of its own, scaled after it, since its le bounds cannot be
// merged with the others'.

// engineGroup is the terms of the engines whose families of a signal share
// a unit.
type engineGroup struct {
	scale float64
	terms []string
}

// engineTerms groups each engine's selectors of sig's families by their
// scale, in table order; term makes a family's selector for an engine.
// byModel, for per-model results, copies an engine's model label to
// model_name; skipUnnamed leaves out the engines that name no model.
//
// Of the engines the server has a series of (names.keep, series naming a
// family's series), only those are asked, and of their families only
// those it has (an engine's older and newer names): an "or" whose side
// matches nothing still costs the server a pass over the other side's
// results.
func (ns names) engineTerms(sig dialect.Signal, byModel, skipUnnamed bool, series func(family string) string, term func(family, modelLabel string) string) []engineGroup {
	var engines []*dialect.Engine
	for i := range dialect.Engines {
		e := &dialect.Engines[i]
		if e.Has(sig) && (!skipUnnamed || len(e.ModelLabels) > 0) {
			engines = append(engines, e)
		}
	}
	engines = keep(ns, engines, func(e *dialect.Engine) []string {
		out := make([]string, 0, len(e.Families(sig)))
		for _, f := range e.Families(sig) {
			out = append(out, series(f))
		}
		return out
	})
	var groups []engineGroup
	for _, e := range engines {
		scale := e.Reads[sig].Scale
		g := len(groups)
		for j := range groups {
			if groups[j].scale == scale {
				g = j
			}
		}
		if g == len(groups) {
			groups = append(groups, engineGroup{scale: scale})
		}
		for _, f := range keep(ns, e.Families(sig), func(f string) []string { return []string{series(f)} }) {
			t := term(f, e.ModelLabel())
			if byModel && e.ModelLabel() != "model_name" {
				t = toModelName(t, e.ModelLabel())
			}
			groups[g].terms = append(groups[g].terms, t)
		}
	}
	return groups
}

// engineGauge is agg by (by) of sig's gauges, scaled to the signal's unit;
// extra are terms already in it (routers' held requests) taken with the
// engines whose unit is the signal's. A per-model gauge leaves out the
// engines that name no model: the embedded source drops them there too.
func (ns names) engineGauge(agg, by string, sig dialect.Signal, byModel bool, extra ...string) string {
	groups := ns.engineTerms(sig, byModel, byModel, func(f string) string { return f }, podSel)
	if len(extra) > 0 {
		groups = withUnit(groups, extra)
	}
	out := ""
	for i, g := range groups {
		if i > 0 {
			out += " or "
		}
		out += scaled(agg+" by ("+by+") ("+firstOf(g.terms...)+")", g.scale)
	}
	return out
}

// withUnit adds terms to the group already in the signal's unit.
func withUnit(groups []engineGroup, terms []string) []engineGroup {
	for i := range groups {
		if groups[i].scale == 1 {
			groups[i].terms = append(groups[i].terms, terms...)
			return groups
		}
	}
	return append(groups, engineGroup{scale: 1, terms: terms})
}

// engineQuantile is the quantile of sig's histograms grouped by the labels
// in by, in seconds.
func (ns names) engineQuantile(sig dialect.Signal, by string, byModel bool) string {
	if by != "" {
		by += ", "
	}
	out := ""
	for i, g := range ns.engineTerms(sig, byModel, false, func(f string) string { return f + "_bucket" }, func(family, modelLabel string) string {
		return rate(family+"_bucket", modelLabel)
	}) {
		if i > 0 {
			out += " or "
		}
		out += scaled("histogram_quantile({{.Quantile}}, sum by ("+by+"le) ("+firstOf(g.terms...)+"))", g.scale)
	}
	return out
}

// scaled is expr times scale, written as PromQL: "100 * expr", "expr / 1000".
func scaled(expr string, scale float64) string {
	switch inv := 1 / scale; {
	case scale == 1:
		return expr
	case scale < 1 && inv == math.Trunc(inv):
		return expr + " / " + strconv.FormatFloat(inv, 'f', -1, 64)
	default:
		return strconv.FormatFloat(scale, 'f', -1, 64) + " * " + expr
	}
}

// toModelName copies an engine's model label to model_name.
func toModelName(s, label string) string {
	return `label_replace(` + s + `, "model_name", "$1", "` + label + `", "(.+)")`
}
