package store

import (
	"maps"
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

func TestRouterSamples(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := New(4)
	k := Key{Namespace: "ml", Name: "epp"}
	held := map[string]float64{"llama": 3, "nan": math.NaN(), "neg": -1, "huge": signal.MaxRequests + 1, "idle": 0}
	s.PutRouter(k, RouterSample{Time: t0, Held: held})
	held["llama"] = 99 // the store keeps its own copy
	got, ok := s.LatestRouter(k, t0, time.Second)
	if want := map[string]float64{"llama": 3, "idle": 0}; !ok || !maps.Equal(got.Held, want) {
		t.Fatalf("got %v, %v; want %v", got.Held, ok, want)
	}
	got.Held["llama"] = 42 // nor does a reader change it
	s.PutRouter(k, RouterSample{Time: t0.Add(-time.Second), Held: map[string]float64{"llama": 7}})
	if got, _ := s.LatestRouter(k, t0, time.Second); got.Held["llama"] != 3 {
		t.Fatalf("an older sample or a reader replaced the newest: %v", got.Held)
	}
	if _, ok := s.LatestRouter(k, t0.Add(2*time.Second), time.Second); ok {
		t.Fatal("a stale router's sample served as fresh")
	}
	if _, ok := s.LatestRouter(Key{Namespace: "other", Name: "epp"}, t0, time.Second); ok {
		t.Fatal("a router of another namespace")
	}
	if pods, _ := s.Forget(t0.Add(time.Minute), 30*time.Second); pods != 1 {
		t.Fatalf("forgot %d, want the router", pods)
	}
	if _, ok := s.LatestRouter(k, t0, time.Hour); ok {
		t.Fatal("a forgotten router still served")
	}
}
