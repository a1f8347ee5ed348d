package scaledown

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"k8s.io/client-go/tools/leaderelection"
)

// RunLeaderElected runs run while this process holds cfg's lease, and
// campaigns again whenever it loses it, until ctx is done. Losing the
// lease stops only run (the controller), never the caller (the metrics
// API). cfg's callbacks are replaced.
func RunLeaderElected(ctx context.Context, cfg leaderelection.LeaderElectionConfig, run func(context.Context), log *slog.Logger) {
	// A new term's loop starts only once the last term's has returned.
	var term sync.Mutex
	cfg.Callbacks = leaderelection.LeaderCallbacks{
		OnStartedLeading: func(ctx context.Context) {
			term.Lock()
			defer term.Unlock()
			log.Info("acquired the scale-down lease")
			run(ctx)
		},
		OnStoppedLeading: func() { log.Info("not leading the scale-down controller") },
		OnNewLeader:      func(id string) { log.Info("scale-down leader", "leader", id) },
	}
	for ctx.Err() == nil {
		le, err := leaderelection.NewLeaderElector(cfg)
		if err != nil {
			log.Error("scale-down leader election; the controller does not run", "err", err)
			return
		}
		le.Run(ctx)
		select {
		case <-ctx.Done():
		case <-time.After(cfg.RetryPeriod):
		}
	}
}
