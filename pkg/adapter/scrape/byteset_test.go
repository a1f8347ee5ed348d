package scrape

import (
	"bytes"
	"testing"
)

// TestLeadingMetricName: the one-pass scan agrees with cutting at the
// first '{', blank or line end and checking the name, on the lines a
// scrape meets.
func TestLeadingMetricName(t *testing.T) {
	for _, tc := range []struct {
		line   string
		name   string
		wantOK bool
	}{
		{`vllm:num_requests_waiting{model_name="m"} 3`, "vllm:num_requests_waiting", true},
		{"up 1", "up", true},
		{"up\t1", "up", true},
		{"up", "up", true},
		{"up\r\n", "up", true},
		{"_x:y_1{} 2", "_x:y_1", true},
		{"", "", false},
		{" up 1", "", false},
		{`{"utf8.name"} 1`, "", false},
		{"1up 1", "", false},
		{"up-down 1", "", false},
		{"upé 1", "", false},
	} {
		name, ok := leadingMetricName([]byte(tc.line))
		if ok != tc.wantOK || ok && string(name) != tc.name {
			t.Errorf("%q: %q, %v; want %q, %v", tc.line, name, ok, tc.name, tc.wantOK)
		}
		// What the filter did before: cut, then check.
		cut := []byte(tc.line)
		if i := bytes.IndexAny(cut, "{ \t\r\n"); i >= 0 {
			cut = cut[:i]
		}
		if old := len(cut) > 0 && isMetricName(cut); old != ok {
			t.Errorf("%q: ok %v, the cut-and-check %v", tc.line, ok, old)
		}
	}
}

func TestByteSetIndex(t *testing.T) {
	for _, tc := range []struct {
		set  *byteSet
		in   string
		want int
	}{
		{blankOrEOL, "HELP x", 4},
		{blankOrEOL, "x", -1},
		{labelsOrBlank, `m{a="b"}`, 1},
		{labelNameEnd, `name="v"`, 4},
		{floatRejects, "0x1p-2", 3},
		{floatRejects, "1.5e3", -1},
	} {
		if got := tc.set.index([]byte(tc.in)); got != tc.want {
			t.Errorf("index(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}
