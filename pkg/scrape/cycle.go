package scrape

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Target is one endpoint to scrape.
type Target struct {
	// Key is the caller's identity for the target, e.g. "namespace/pod".
	Key string
	// URL is the full endpoint URL, http(s)://ip:port/path.
	URL string
	// Families limits what is parsed of the target's exposition; nil
	// parses all of it.
	Families *Families
}

// Result is the outcome of scraping one Target.
type Result struct {
	Target   Target
	Families map[string]*dto.MetricFamily // nil when Err is set
	// Time is when the scrape started; use it as the sample timestamp.
	Time     time.Time
	Duration time.Duration
	// Err is nil on success; Reason(Err) classifies it.
	Err error
}

// Cycle scrapes every target, at most Config.Workers at a time, and calls sink
// exactly once per target as its result becomes available. sink is called
// from several goroutines at once and must be safe for concurrent use; a slow
// sink holds up its worker, so it should hand results off rather than do
// heavy work.
//
// Each scrape has its own Config.Timeout, so a slow or broken target delays
// nothing but its own result. Cycle returns once sink has been called for
// every target. When ctx is cancelled, scrapes in flight are aborted and
// targets not yet started are reported at once, all with a "canceled" Err.
func (s *Scraper) Cycle(ctx context.Context, targets []Target, sink func(Result)) {
	var (
		next atomic.Int64 // index of the next target to claim
		wg   sync.WaitGroup
	)
	workers := min(s.cfg.Workers, len(targets))
	for range workers {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(len(targets)) {
					return
				}
				sink(s.scrapeTarget(ctx, targets[i]))
			}
		})
	}
	wg.Wait()
}

func (s *Scraper) scrapeTarget(ctx context.Context, t Target) Result {
	start := time.Now()
	fams, err := s.ScrapeFamilies(ctx, t.URL, t.Families)
	return Result{Target: t, Families: fams, Time: start, Duration: time.Since(start), Err: err}
}
