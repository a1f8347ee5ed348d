package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// limiter bounds the requests served at once. A request over the bound
// waits a moment for a slot instead of failing at once: scrapers that
// happen to arrive together (a Prometheus HA pair, the adapter's replicas)
// are each served a few milliseconds later, since a scrape only renders the
// latest snapshot. A flood still holds no more than limit renders and limit
// waiters; everything beyond is refused with 503 straight away.
type limiter struct {
	slots    chan struct{}
	waiters  chan struct{}
	wait     time.Duration
	refused  prometheus.Counter
	inFlight prometheus.Gauge
}

func newLimiter(limit int, wait time.Duration, refused prometheus.Counter, inFlight prometheus.Gauge) *limiter {
	return &limiter{
		slots:    make(chan struct{}, limit),
		waiters:  make(chan struct{}, limit),
		wait:     wait,
		refused:  refused,
		inFlight: inFlight,
	}
}

// acquire takes a slot, waiting up to l.wait for one; it reports whether it
// got one.
func (l *limiter) acquire(ctx context.Context) bool {
	select {
	case l.slots <- struct{}{}:
		return true
	default:
	}
	if l.wait <= 0 {
		return false
	}
	select {
	case l.waiters <- struct{}{}:
	default:
		return false
	}
	defer func() { <-l.waiters }()
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case l.slots <- struct{}{}:
		return true
	case <-t.C:
	case <-ctx.Done():
	}
	return false
}

func (l *limiter) release() { <-l.slots }

// handler is the gin middleware enforcing the limit; nil for no limit.
func (l *limiter) handler() gin.HandlerFunc {
	if l == nil {
		return nil
	}
	retryAfter := strconv.Itoa(max(1, int(l.wait.Round(time.Second)/time.Second)))
	return func(c *gin.Context) {
		if !l.acquire(c.Request.Context()) {
			l.refused.Inc()
			c.Header("Retry-After", retryAfter)
			c.String(http.StatusServiceUnavailable, "too many requests in flight (limit %d); retry later\n", cap(l.slots))
			c.Abort()
			return
		}
		l.inFlight.Inc()
		defer func() { l.inFlight.Dec(); l.release() }()
		c.Next()
	}
}
