package app

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// setMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// ratio of the memory limit that limits reports (the container's, from its
// cgroup), so that the garbage collector works harder as the heap nears
// the limit instead of the kernel's OOM killer ending the adapter: each
// scrape cycle makes garbage in proportion to the targets, and by default
// the heap may grow to twice what is live. It follows a changed limit
// until ctx ends. An explicit GOMEMLIMIT wins, and ratio 0 leaves the
// runtime as it is.
func setMemoryLimit(ctx context.Context, ratio float64, limits memlimit.Provider, log *slog.Logger) {
	if ratio == 0 {
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(limits),
		memlimit.WithLogger(log), memlimit.WithRefreshInterval(ctx, time.Minute))
	if err != nil {
		return // Set has logged it; the runtime's default stands
	}
	if limit < math.MaxInt64 {
		log.Info("Go soft memory limit set from the container's", "bytes", limit, "ratio", ratio)
	}
}
