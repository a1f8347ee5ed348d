package inference

import (
	"slices"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// TestFamiliesWithout: the families of the skipped signals go, every
// other family and every prefix stays.
func TestFamiliesWithout(t *testing.T) {
	all, allPrefixes := Families()
	for _, skip := range [][]dialect.Signal{nil, {dialect.ITL}, {dialect.TTFT, dialect.Prefill}, {dialect.TTFT, dialect.ITL, dialect.Prefill}} {
		names, prefixes := FamiliesWithout(skip...)
		if !slices.Equal(prefixes, allPrefixes) {
			t.Errorf("skip %v: prefixes %v, want %v", skip, prefixes, allPrefixes)
		}
		var want []string
		for i := range mappings {
			for _, s := range dialect.Signals() {
				if !slices.Contains(skip, s) {
					want = append(want, mappings[i].Families(s)...)
				}
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("skip %v: %v, want %v", skip, names, want)
		}
		for i := range mappings {
			for _, s := range skip {
				for _, f := range mappings[i].Families(s) {
					if slices.Contains(names, f) && !slices.Contains(otherFamilies(s), f) {
						t.Errorf("skip %v: %s kept", skip, f)
					}
				}
			}
		}
		if len(skip) == 0 && !slices.Equal(names, all) {
			t.Errorf("nothing skipped: %v, want Families' %v", names, all)
		}
	}
}

// otherFamilies are the families of the signals other than s, which a
// family may share with s.
func otherFamilies(s dialect.Signal) []string {
	var out []string
	for i := range mappings {
		for _, o := range dialect.Signals() {
			if o != s {
				out = append(out, mappings[i].Families(o)...)
			}
		}
	}
	return out
}
