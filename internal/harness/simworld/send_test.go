package simworld

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

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
