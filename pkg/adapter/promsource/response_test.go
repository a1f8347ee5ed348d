package promsource

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/provider"
)

// TestResponseCap: an answer past Config.MaxResponseBytes is an error,
// not a value and not the adapter's memory.
func TestResponseCap(t *testing.T) {
	fp := newFakeProm(t)
	big := vector(t0, series{podLabels("a"), "2"}, series{map[string]string{"pod": "b", "pad": strings.Repeat("x", 4<<10)}, "5"})
	fp.setReply(func(string) (int, string) { return 200, big })
	s, err := New(Config{URL: fp.URL, MaxResponseBytes: 1 << 10})
	if err != nil {
		t.Fatal(err)
	}
	pods := []*corev1.Pod{pod("ml", "a", true), pod("ml", "b", true)}
	if vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err == nil {
		t.Fatalf("an answer of %d bytes over a 1 KiB cap gave %+v, want an error", len(big), vals)
	}
	s, err = New(Config{URL: fp.URL})
	if err != nil {
		t.Fatal(err)
	}
	if vals, err := s.Pods(context.Background(), provider.NewPodSet("ml", pods), metric(t, provider.QueueDepth), nil); err != nil || vals[0].V != 2 {
		t.Fatalf("the same answer under the default cap: %+v, %v", vals, err)
	}
}
