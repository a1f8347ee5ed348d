package simworld

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// ttftLog collects first-token callbacks from many servers.
type ttftLog struct {
	mu    sync.Mutex
	ttfts []time.Duration
}

func (l *ttftLog) record(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ttfts = append(l.ttfts, d)
}

func (l *ttftLog) snapshot() []time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ttfts)
}

func TestSendRoundRobinsOverReadyPods(t *testing.T) {
	app := withLabels("app", "chat")
	l4 := withEnv("SIM_PROFILE", "l4-llama-3.1-8b")
	tw := startWorld(t, node("n6", 8),
		pod("llm", "a", "n6", podIP(6, 1), InferenceImage, app, l4),
		pod("llm", "b", "n6", podIP(6, 2), InferenceImage, app, l4),
		pod("llm", "c", "n6", podIP(6, 3), InferenceImage, app, l4),
	)
	eventually(t, 10*time.Second, "servers up", func() error {
		for _, name := range []string{"a", "b", "c"} {
			if tw.Server("llm", name) == nil {
				return errors.New(name + " has no server")
			}
		}
		return nil
	})
	tw.setReady(t, "llm", "c", false)
	chat := labels.SelectorFromSet(labels.Set{"app": "chat"})
	eventually(t, 5*time.Second, "c out of the backends", func() error {
		for range 4 {
			if got, err := tw.Send("llm", chat, inferencesim.DefaultRequest, nil); err != nil || got == "c" {
				return errors.New("sent to " + got)
			}
		}
		return nil
	})

	var log ttftLog
	var got []string
	for range 6 {
		name, err := tw.Send("llm", chat, inferencesim.Request{ContextTokens: 400, GeneratedTokens: 5}, log.record)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, name)
	}
	for i := 2; i < len(got); i++ {
		if got[i] != got[i-2] || got[i] == got[i-1] {
			t.Fatalf("sent to %v, want a and b in turn", got)
		}
	}
	eventually(t, 5*time.Second, "six first tokens", func() error {
		if n := len(log.snapshot()); n != 6 {
			return errors.New("not yet")
		}
		return nil
	})
	// 400 tokens at the L4 profile's 4,000 tokens/s take 100 ms of prefill.
	for _, d := range log.snapshot() {
		if d < 100*time.Millisecond {
			t.Errorf("TTFT %v is below the L4 prefill time: SIM_PROFILE was ignored", d)
		}
	}

	_, err := tw.Send("llm", labels.SelectorFromSet(labels.Set{"app": "none"}), inferencesim.DefaultRequest, nil)
	if !errors.Is(err, ErrNoBackend) {
		t.Errorf("send to no pods: err = %v, want ErrNoBackend", err)
	}
}

// TestDeletedPodDrains: with a drain timeout, a deleted pod's server frees
// its address at once but still serves the requests it holds, on the
// World's clock.
func TestDeletedPodDrains(t *testing.T) {
	start := time.Now()
	const speedup = 10
	fast := func() time.Time { return start.Add(speedup * time.Since(start)) }
	tw := startWorldWith(t, func(o *Options) {
		o.Now = fast
		o.DrainTimeout = 5 * time.Minute
	}, node("n7", 8), pod("llm", "a", "n7", podIP(7, 1), InferenceImage, withLabels("app", "chat")))
	url := "http://" + podIP(7, 1) + ":8000/healthz"
	eventually(t, 10*time.Second, "server up", func() error { _, err := httpClient.Get(url); return err })

	// Ten 4,000-token prompts take 2.5 s of prefill at 16,000 tokens/s
	// (0.25 s of wall time at 10x), so most are queued at the deletion.
	var log ttftLog
	chat := labels.SelectorFromSet(labels.Set{"app": "chat"})
	sentAt := time.Now()
	for range 10 {
		if _, err := tw.Send("llm", chat, inferencesim.Request{ContextTokens: 4000, GeneratedTokens: 20}, log.record); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.client.CoreV1().Pods("llm").Delete(context.Background(), "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "address freed", func() error { return refused(url) })
	eventually(t, 10*time.Second, "all ten served while draining", func() error {
		if n := len(log.snapshot()); n != 10 {
			return errors.New("not yet")
		}
		return nil
	})
	wall := time.Since(sentAt)
	if last := slices.Max(log.snapshot()); last < 2*time.Second || last > speedup*wall {
		t.Errorf("last TTFT %v after %v of wall time; want about 2.5 s on the %dx clock", last, wall, speedup)
	}
}
