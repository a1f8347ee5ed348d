package scrape

import (
	"strings"
	"testing"
	"unsafe"
)

// TestInternBounded: a worker's interned strings stay within their count
// and byte bounds whatever a target's label values are, long values are
// not kept, and a short one that repeats is the same string.
func TestInternBounded(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n, size     int
		wantKeptMax int // entries the table may hold at the end
	}{
		{"1,800 model names of 2,000 bytes (a tenant's bomb)", 1800, 2000, 0},
		{"10,000 names of 128 bytes", 10000, maxInternLen, maxInternedBytes / maxInternLen},
		{"10,000 short label values", 10000, 8, maxInterned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newArena()
			for i := range tc.n {
				name := []byte(strings.Repeat("x", tc.size-8) + strings.Repeat("0", 8))
				copy(name[len(name)-8:], []byte{byte('0' + i%10), byte('0' + i/10%10), byte('0' + i/100%10), byte('0' + i/1000%10), byte('0' + i/10000%10)})
				if got := a.intern(name); got != string(name) {
					t.Fatalf("intern(%q...) = %q...", name[:16], got[:16])
				}
			}
			if a.internedBytes > maxInternedBytes || len(a.interned) > tc.wantKeptMax {
				t.Fatalf("the table holds %d strings of %d bytes, want at most %d strings and %d bytes", len(a.interned), a.internedBytes, tc.wantKeptMax, maxInternedBytes)
			}
			sum := 0
			for s := range a.interned {
				sum += len(s)
			}
			if sum != a.internedBytes {
				t.Fatalf("internedBytes = %d, the strings kept add up to %d", a.internedBytes, sum)
			}
		})
	}
	a := newArena()
	first := a.intern([]byte(`model_name`))
	if again := a.intern([]byte(`model_name`)); unsafe.StringData(again) != unsafe.StringData(first) {
		t.Fatal("a repeated short string was not interned")
	}
}
