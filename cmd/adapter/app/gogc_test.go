package app

import (
	"io"
	"log/slog"
	"runtime/debug"
	"testing"
)

// TestSetGCPercent: the flag sets the collector's target unless GOGC is in
// the environment.
func TestSetGCPercent(t *testing.T) {
	before := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(before) })
	for _, tc := range []struct {
		name    string
		env     map[string]string
		percent int
		want    int
	}{
		{"flag", nil, 60, 60},
		{"explicit GOGC wins", map[string]string{"GOGC": "100"}, 60, 100},
		{"empty GOGC is unset", map[string]string{"GOGC": ""}, 60, 60},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			setGCPercent(tc.percent, func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }, slog.New(slog.NewTextHandler(io.Discard, nil)))
			if got := debug.SetGCPercent(100); got != tc.want {
				t.Errorf("GC percent %d, want %d", got, tc.want)
			}
		})
	}
}
