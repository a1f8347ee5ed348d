package provider

import (
	"context"
	"net/http"
	"sync"

	"k8s.io/metrics/pkg/apis/custom_metrics"
)

// A Pods list's items are the largest allocation of a list: at 10,000 pods,
// 2.5 MB of MetricValue, most of all a list allocates once the served
// v1beta2 list shares them (pkg/adapter/zerocopy), and garbage as soon as
// the API server has encoded the answer. At lists served back to back they
// are most of what the collector has to keep up with (docs/performance.md,
// "List items recycled, again"). Recycle lends a request's lists their
// backing arrays from a pool and takes them back when the request's
// handler returns, the answer written. A list made outside such a request
// (the KEDA scaler, tests) allocates its own.

// itemPool holds backing arrays of items, any length.
var itemPool sync.Pool

// recycler is one request's: the arrays its lists borrowed.
type recycler struct {
	mu       sync.Mutex
	borrowed []*[]custom_metrics.MetricValue
}

type recyclerKey struct{}

// Recycle wraps the handler of the metrics APIs: lists made while it serves a
// request borrow their items' arrays, returned when it returns. It must
// wrap whatever encodes the answer (the API server's handler, inside its
// filters): nothing may hold the items after that.
func Recycle(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := &recycler{}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), recyclerKey{}, rc)))
		rc.mu.Lock()
		defer rc.mu.Unlock()
		for _, b := range rc.borrowed {
			clear(*b) // drop what the items point to before the array waits in the pool
			itemPool.Put(b)
		}
		rc.borrowed = nil
	})
}

// newItems returns n zeroed items: borrowed for ctx's request when it has a
// recycler, allocated otherwise.
func newItems(ctx context.Context, n int) []custom_metrics.MetricValue {
	rc, ok := ctx.Value(recyclerKey{}).(*recycler)
	if !ok {
		return make([]custom_metrics.MetricValue, n)
	}
	b, _ := itemPool.Get().(*[]custom_metrics.MetricValue)
	if b == nil || cap(*b) < n {
		s := make([]custom_metrics.MetricValue, n)
		b = &s
	}
	*b = (*b)[:n]
	rc.mu.Lock()
	rc.borrowed = append(rc.borrowed, b)
	rc.mu.Unlock()
	return *b
}
