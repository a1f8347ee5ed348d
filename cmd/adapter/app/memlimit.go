package app

import (
	"context"
	"log/slog"
	"math"
	"time"

	"github.com/KimMachineGun/automemlimit/memlimit"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
)

// setMemoryLimit sets the Go runtime's soft memory limit (GOMEMLIMIT) to
// ratio of the memory limit that limits reports (the container's, from its
// cgroup), less reserve, so that the garbage collector works harder as the
// heap nears the limit instead of the kernel's OOM killer ending the
// adapter: each scrape cycle makes garbage in proportion to the targets,
// and by default the heap may grow to twice what is live. reserve is
// memory the cgroup is charged outside the Go runtime that grows with the
// fleet: the kernel's for the sockets kept alive to targets
// (keptConnReserve). It follows a changed limit until ctx ends. An
// explicit GOMEMLIMIT wins, and ratio 0 leaves the runtime as it is.
func setMemoryLimit(ctx context.Context, ratio float64, reserve int64, limits memlimit.Provider, log *slog.Logger) {
	if ratio == 0 {
		return
	}
	limit, err := memlimit.Set(memlimit.WithRatio(ratio), memlimit.WithProvider(lessReserve(limits, ratio, reserve, log)),
		memlimit.WithLogger(log), memlimit.WithRefreshInterval(ctx, time.Minute))
	if err != nil {
		return // Set has logged it; the runtime's default stands
	}
	if limit < math.MaxInt64 {
		log.Info("Go soft memory limit set from the container's", "bytes", limit, "ratio", ratio, "reservedBytes", reserve)
	}
}

// minGoShare is the least share of the container's limit the Go runtime
// is left when the reserve would take more.
const minGoShare = 0.25

// lessReserve is limits with reserve/ratio taken off each answer, so that
// memlimit's ratio of it is ratio of the container's limit less reserve.
// A reserve that would leave the runtime under minGoShare of the container
// is cut to leave it that, with a warning: the container is too small for
// the connections the adapter may keep.
func lessReserve(limits memlimit.Provider, ratio float64, reserve int64, log *slog.Logger) memlimit.Provider {
	if reserve <= 0 {
		return limits
	}
	return func() (uint64, error) {
		container, err := limits()
		if err != nil {
			return container, err
		}
		take := uint64(float64(reserve) / ratio)
		if floor := uint64(minGoShare / ratio * float64(container)); container < floor+take {
			log.Warn("the memory limit leaves little beside the kernel's memory for kept connections; lower --scrape-max-idle-conns or raise the limit",
				"containerBytes", container, "reservedBytes", reserve)
			return max(floor, container-min(take, container)), nil
		}
		return container - take, nil
	}
}

// keptConnReserve is what the kernel charges the adapter's memory cgroup
// for the connections it may keep alive to targets: conns at
// scrape.KernelBytesPerConn each, none when nothing is scraped.
func keptConnReserve(o *Options) int64 {
	if o.Source != SourceEmbedded {
		return 0
	}
	return int64(o.MaxIdleConns) * scrape.KernelBytesPerConn
}
