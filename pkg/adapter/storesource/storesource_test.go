package storesource

import (
	"runtime"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestModelMatcher: the memoised matcher answers what the selector says of
// the model label, whatever the order of the models it is asked about.
func TestModelMatcher(t *testing.T) {
	for _, expr := range []string{"", provider.ModelLabel + "=llama", provider.ModelLabel + "!=llama", provider.ModelLabel + " in (llama, mistral)", "!" + provider.ModelLabel, provider.ModelLabel, "other=x"} {
		sel, err := labels.Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		mm := newModelMatcher(sel)
		for _, model := range []string{"llama", "llama", "mistral", "", "llama", "", "", "qwen"} {
			if got, want := mm.matches(model), sel.Matches(labels.Set{provider.ModelLabel: model}); got != want {
				t.Errorf("%q on model %q = %v, want %v", expr, model, got, want)
			}
		}
	}
	if mm := newModelMatcher(nil); !mm.matches("anything") {
		t.Error("a nil selector matches every model")
	}
}

func TestInParallel(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, n := range []int{0, 1, parallelMin, 2*parallelMin - 1, 2 * parallelMin, 10001} {
		var mu sync.Mutex
		seen := make([]int, n)
		calls := 0
		inParallel(n, func(lo, hi int) {
			mu.Lock()
			defer mu.Unlock()
			calls++
			for i := lo; i < hi; i++ {
				seen[i]++
			}
		})
		for i, c := range seen {
			if c != 1 {
				t.Fatalf("n=%d: index %d visited %d times", n, i, c)
			}
		}
		if want := max(1, min(4, n/parallelMin)); calls != want {
			t.Errorf("n=%d: %d shares, want %d", n, calls, want)
		}
	}
}
