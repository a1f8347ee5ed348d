package inference

import (
	"slices"

	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// mapping is one engine's entry in the dialect table (pkg/signal/dialect): the
// families of its signals, their units and its model labels, in detection
// priority. Detect reads an engine through it and through nothing else, so
// that the PromQL defaults and the simulator, which read the same table,
// agree with it.
type mapping = dialect.Engine

// mappings are the engines in detection priority.
var mappings = dialect.Engines

// Families returns what Detect reads of a scrape: the families of every
// dialect's signals, and the dialects' prefixes, of which
// Detect needs one family to tell the dialect when none of the signals is
// there. A scraper may skip everything else.
func Families() (names, prefixes []string) { return FamiliesWithout() }

// FamiliesWithout is Families less the families of the signals skip: a
// scrape whose histograms nobody reads need not parse them. Detect then
// finds those signals absent.
func FamiliesWithout(skip ...dialect.Signal) (names, prefixes []string) {
	for i := range mappings {
		m := &mappings[i]
		prefixes = append(prefixes, m.Prefix)
		for _, s := range dialect.Signals() {
			if !slices.Contains(skip, s) {
				names = append(names, m.Families(s)...)
			}
		}
	}
	return names, prefixes
}
