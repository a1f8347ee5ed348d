package gather

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
)

// capacityScraper scrapes, of the targets each cycle is given, only the
// first capacity healthy ones in the order given, as a scraper whose
// workers can take no more before the cycle's deadline; the others are
// reported as the deadline leaves them, untried.
type capacityScraper struct {
	*scrape.Scraper
	capacity int
	scraped  []map[string]bool // by cycle
}

func (c *capacityScraper) Cycle(ctx context.Context, ts []scrape.Target, sink func(scrape.Result)) {
	n := min(c.capacity, len(ts))
	done := map[string]bool{}
	var mu sync.Mutex // the scraper's workers call the sink concurrently
	c.Scraper.Cycle(ctx, ts[:n], func(r scrape.Result) {
		mu.Lock()
		done[r.Target.Key] = r.Err == nil
		mu.Unlock()
		sink(r)
	})
	c.scraped = append(c.scraped, done)
	expired, cancel := context.WithDeadline(ctx, time.Now())
	defer cancel()
	c.Scraper.Cycle(expired, ts[n:], sink)
}

// TestOverloadLeavesNoTargetOutForLong: 12 healthy pods and workers that
// can scrape only 5 a cycle. Every pod is still scraped at least once in
// every three cycles (12/5, rounded up): those the deadline left out go
// first in the next cycle. (In discovery order, the last seven were never
// scraped again.)
func TestOverloadLeavesNoTargetOutForLong(t *testing.T) {
	_, port := serve(t, newSim(t, 10))
	var pods podList
	for i := range 12 {
		pods = append(pods, annotatedPod(fmt.Sprintf("pod-%02d", i), port))
	}
	sc := &capacityScraper{Scraper: scrape.New(scrape.Config{Timeout: 10 * time.Second}), capacity: len(pods)}
	g, err := New(Config{Pods: pods, Scraper: sc, Store: store.New(30), Interval: time.Second, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	g.Cycle(t.Context()) // every pod answers once: all healthy
	if got := len(sc.scraped[0]); got != len(pods) {
		t.Fatalf("the first cycle scraped %d pods, want all %d", got, len(pods))
	}
	sc.capacity = 5
	const cycles = 9
	for range cycles {
		g.Cycle(t.Context())
	}
	for _, p := range pods {
		key := p.Namespace + "/" + p.Name
		out := 0
		for c := 1; c <= cycles; c++ {
			if sc.scraped[c][key] {
				out = 0
				continue
			}
			if out++; out >= 3 {
				t.Errorf("%s was left out of cycles %d to %d", key, c-out+1, c)
				break
			}
		}
	}
}
