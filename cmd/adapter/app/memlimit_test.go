package app

import (
	"context"
	"io"
	"log/slog"
	"math"
	"runtime/debug"
	"testing"

	"github.com/KimMachineGun/automemlimit/memlimit"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
)

// TestSetMemoryLimit: the soft limit is the ratio of the container's
// limit less the reserve, and never under a quarter of the container's;
// an explicit GOMEMLIMIT or ratio 0 leave the runtime's limit as it was,
// and without a container limit there is none.
func TestSetMemoryLimit(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	const container = 400 << 20
	for _, tc := range []struct {
		name    string
		env     string
		ratio   float64
		reserve int64
		limits  memlimit.Provider
		want    int64 // -1: unchanged
	}{
		{"ratio of the container's", "", 0.9, 0, memlimit.Limit(container), int64(0.9 * container)},
		{"less the kept connections' reserve", "", 0.9, 64 << 20, memlimit.Limit(container), int64(0.9*container) - 64<<20},
		{"a reserve past the container leaves a quarter", "", 0.9, 1 << 30, memlimit.Limit(container), container / 4},
		{"disabled", "", 0, 64 << 20, memlimit.Limit(container), -1},
		{"GOMEMLIMIT wins", "300MiB", 0.9, 64 << 20, memlimit.Limit(container), -1},
		{"no container limit", "", 0.9, 64 << 20, func() (uint64, error) { return 0, memlimit.ErrNoLimit }, math.MaxInt64},
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
			setMemoryLimit(ctx, tc.ratio, tc.reserve, tc.limits, log)
			want := tc.want
			if want == -1 {
				want = before
			}
			// Within a byte a MiB: the ratio is applied to a float.
			if got := debug.SetMemoryLimit(-1); math.Abs(float64(got-want)) > float64(want)/(1<<20) {
				t.Errorf("limit %d, want %d", got, want)
			}
		})
	}
}

// TestKeptConnReserve: the embedded source reserves the kernel's memory
// for every connection it may keep; the PromQL source scrapes nothing.
func TestKeptConnReserve(t *testing.T) {
	for _, tc := range []struct {
		source string
		conns  int
		want   int64
	}{
		{SourceEmbedded, 16384, 16384 * scrape.KernelBytesPerConn},
		{SourceEmbedded, 100, 100 * scrape.KernelBytesPerConn},
		{SourcePrometheus, 16384, 0},
	} {
		o := NewOptions()
		o.Source, o.MaxIdleConns = tc.source, tc.conns
		if got := keptConnReserve(o); got != tc.want {
			t.Errorf("%s, %d kept connections: reserve %d, want %d", tc.source, tc.conns, got, tc.want)
		}
	}
}
