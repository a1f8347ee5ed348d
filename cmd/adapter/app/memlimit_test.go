package app

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// TestSetMemoryLimit: the soft limit is the ratio of the container's
// limit; an explicit GOMEMLIMIT or ratio 0 leave the runtime's limit as it
// was, and without a container limit there is none.
func TestSetMemoryLimit(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const container = 400 << 20
	for _, tc := range []struct {
		name   string
		env    string
		ratio  float64
		limits memlimit.Provider
		want   int64 // -1: unchanged
	}{
		{"ratio of the container's", "", 0.9, memlimit.Limit(container), int64(0.9 * container)},
		{"disabled", "", 0, memlimit.Limit(container), -1},
		{"GOMEMLIMIT wins", "300MiB", 0.9, memlimit.Limit(container), -1},
		{"no container limit", "", 0.9, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, math.MaxInt64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const before = 123 << 20
			prev := debug.SetMemoryLimit(before)
			defer debug.SetMemoryLimit(prev)
			if tc.env != "" {
				t.Setenv("GOMEMLIMIT", tc.env)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			setMemoryLimit(ctx, tc.ratio, tc.limits, log)
			want := tc.want
			if want == -1 {
				want = before
			}
			if got := debug.SetMemoryLimit(-1); got != want {
				t.Errorf("limit %d, want %d", got, want)
			}
		})
	}
}
