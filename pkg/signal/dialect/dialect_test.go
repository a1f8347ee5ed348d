package dialect

import (
	"math"
	"slices"
	"strings"
	"testing"
)

// TestEnginesWellFormed: every entry can be read by all three consumers:
// a name and prefix of its own, every family under its prefix and in no
// other engine, a positive scale, and for histograms the default bounds the
// simulator serves, finite and strictly increasing.
func TestEnginesWellFormed(t *testing.T) {
	names := map[Name]bool{}
	owner := map[string]Name{}
	for _, e := range Engines {
		if e.Name == "" || names[e.Name] {
			t.Errorf("engine %q: empty or repeated name", e.Name)
		}
		names[e.Name] = true
		for _, other := range Engines {
			if other.Name != e.Name && (strings.HasPrefix(e.Prefix, other.Prefix) || e.Prefix == "") {
				t.Errorf("%s: prefix %q is empty or inside %s's %q: detection could not tell them apart", e.Name, e.Prefix, other.Name, other.Prefix)
			}
		}
		if len(e.Reads) == 0 {
			t.Errorf("%s: reads no signal", e.Name)
		}
		for s, r := range e.Reads {
			if s < 0 || s >= NumSignals {
				t.Errorf("%s: unknown signal %d", e.Name, s)
			}
			if len(r.Families) == 0 {
				t.Errorf("%s %s: no family", e.Name, s)
			}
			for _, f := range r.Families {
				if !strings.HasPrefix(f, e.Prefix) {
					t.Errorf("%s %s: %s is not under the dialect's prefix %q", e.Name, s, f, e.Prefix)
				}
				if o, ok := owner[f]; ok {
					t.Errorf("%s %s: %s is read by %s too", e.Name, s, f, o)
				}
				owner[f] = e.Name
			}
			if !(r.Scale > 0) || math.IsInf(r.Scale, 0) {
				t.Errorf("%s %s: scale %g", e.Name, s, r.Scale)
			}
			if r.Help == "" {
				t.Errorf("%s %s: no help text for the simulator", e.Name, s)
			}
			if r.PerRequestMean && s != ITL {
				t.Errorf("%s %s: PerRequestMean is for ITL only", e.Name, s)
			}
			if !s.Histogram() {
				if len(r.Buckets) > 0 {
					t.Errorf("%s %s: buckets on a gauge", e.Name, s)
				}
				continue
			}
			if len(r.Buckets) == 0 {
				t.Errorf("%s %s: a histogram without default buckets", e.Name, s)
			}
			for i, b := range r.Buckets {
				if math.IsNaN(b) || math.IsInf(b, 0) || (i > 0 && b <= r.Buckets[i-1]) {
					t.Errorf("%s %s: buckets not finite and strictly increasing: %v", e.Name, s, r.Buckets)
					break
				}
			}
		}
	}
}

func TestLookupNamesEnumerate(t *testing.T) {
	var names []Name
	var prefixes []string
	for _, e := range Engines {
		names = append(names, e.Name)
		prefixes = append(prefixes, e.Prefix+"*")
	}
	if got := Names(); !slices.Equal(got, names) {
		t.Errorf("Names() = %v, want the table's %v", got, names)
	}
	for _, n := range names {
		if e, ok := Lookup(n); !ok || e.Name != n {
			t.Errorf("Lookup(%s) = %v, %v", n, e, ok)
		}
	}
	if _, ok := Lookup("nope"); ok {
		t.Error("Lookup found an engine that is not in the table")
	}
	// The messages that list the engines: "vllm:*, sglang:*, tgi_* or
	// nv_inference_*" while the table holds those four.
	want := strings.Join(prefixes[:len(prefixes)-1], ", ") + " or " + prefixes[len(prefixes)-1]
	if got := Enumerate(func(e *Engine) string { return e.Prefix + "*" }); got != want || len(Engines) < 2 {
		t.Errorf("Enumerate = %q, want %q", got, want)
	}
	if got := Signals(); len(got) != int(NumSignals) || got[0] != Queue || got[len(got)-1] != ITL {
		t.Errorf("Signals() = %v", got)
	}
	for _, s := range Signals() {
		if strings.HasPrefix(s.String(), "signal(") {
			t.Errorf("signal %d has no name", int(s))
		}
	}
	if got := Signal(99).String(); got != "signal(99)" {
		t.Errorf("Signal(99) = %q", got)
	}
}
