package httpapi

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestLimiterQueue checks the bounds themselves: limit requests served,
// limit more waiting, the rest refused without waiting; a waiter gets the
// first slot freed, and gives up when its request is cancelled or its wait
// ends.
func TestLimiterQueue(t *testing.T) {
	l := newLimiter(1, time.Hour, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "y"}))
	ctx := context.Background()
	if !l.acquire(ctx) {
		t.Fatal("first acquire refused")
	}
	got := make(chan bool)
	go func() { got <- l.acquire(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(l.waiters) != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the second request never waited")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if l.acquire(ctx) {
		t.Fatal("a request beyond the slot and the queue was admitted")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refusing with a full queue took %v, want no wait", d)
	}
	l.release()
	if !<-got {
		t.Fatal("the waiter did not get the freed slot")
	}

	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- l.acquire(cctx) }()
	for len(l.waiters) != 1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	if <-got {
		t.Error("a cancelled waiter got a slot")
	}
	if len(l.waiters) != 0 {
		t.Errorf("%d waiters left after cancellation", len(l.waiters))
	}

	short := newLimiter(1, 10*time.Millisecond, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), prometheus.NewGauge(prometheus.GaugeOpts{Name: "y"}))
	short.acquire(ctx)
	if short.acquire(ctx) {
		t.Error("a waiter got a slot that was never freed")
	}
}
