package podresources

import (
	"context"
	"time"
)

// Stats describes the refresh history of a Watcher.
type Stats struct {
	// LastSuccess is when the last successful refresh completed.
	LastSuccess time.Time
	// Failures counts failed refreshes.
	Failures uint64
	// LastError is the message of the most recent failure; it is cleared
	// by the next success, so a non-empty value means "currently failing".
	LastError string
	// Successes counts successful refreshes.
	Successes uint64
}

// Stats returns a copy of the refresh statistics.
func (w *Watcher) Stats() Stats {
	w.statsMu.Lock()
	defer w.statsMu.Unlock()
	return w.stats
}

func (w *Watcher) recordSuccess(now time.Time, devices int) {
	w.statsMu.Lock()
	w.stats.Successes++
	w.stats.LastSuccess = now
	w.stats.LastError = ""
	recovered := w.loggedErr != ""
	w.loggedErr = ""
	w.statsMu.Unlock()

	if recovered {
		w.log.Info("Pod resources refresh recovered", "devices", devices)
	}
}

func (w *Watcher) recordFailure(ctx context.Context, err error) {
	msg := err.Error()
	// A caller that gave up (typically shutdown) is not worth a warning.
	canceled := ctx.Err() != nil
	w.statsMu.Lock()
	w.stats.Failures++
	w.stats.LastError = msg
	failures := w.stats.Failures
	changed := !canceled && msg != w.loggedErr
	if changed {
		w.loggedErr = msg
	}
	w.statsMu.Unlock()

	switch {
	case canceled:
		w.log.Debug("Pod resources refresh canceled", "err", err)
	case changed:
		w.log.Warn("Pod resources refresh failed; keeping the last GPU attribution until it expires",
			"err", err, "failures", failures, "maxAge", w.opts.MaxAge)
	}
}
