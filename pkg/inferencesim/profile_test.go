package inferencesim

import (
	"strings"
	"testing"
	"time"
)

func TestProfileByName(t *testing.T) {
	for name := range Profiles {
		p, err := ProfileByName(name)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := p.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := ProfileByName("a100")
	if err == nil || !strings.Contains(err.Error(), "l4-llama-3.1-8b") {
		t.Errorf("unknown profile: err = %v, want one listing the known names", err)
	}
}

// TestL4ProfileCapacity pins what docs/inferencesim.md says of the L4
// profile: one replica keeps up with 2 requests/s of the default request
// and falls behind at 3.
func TestL4ProfileCapacity(t *testing.T) {
	for _, tc := range []struct {
		rate       float64
		keepsUp    bool
		maxMeanTTF time.Duration
	}{
		{rate: 0.5, keepsUp: true, maxMeanTTF: time.Second},
		{rate: 2, keepsUp: true, maxMeanTTF: time.Second},
		{rate: 3, keepsUp: false},
	} {
		s := newSim(t, L4Profile(), tc.rate, 3)
		s.run(2 * time.Minute)
		first := len(s.ttfts)
		s.run(2 * time.Minute)
		late := s.ttfts[first:]
		queue := s.e.Peek().Waiting
		t.Logf("%.1f req/s: mean TTFT over minutes 3-4 %v, queue %d", tc.rate, mean(late).Round(time.Millisecond), queue)
		switch {
		case tc.keepsUp && (queue > 5 || mean(late) > tc.maxMeanTTF):
			t.Errorf("%.1f req/s: queue %d, mean TTFT %v; want a replica that keeps up", tc.rate, queue, mean(late))
		case !tc.keepsUp && queue < 20:
			t.Errorf("%.1f req/s: queue %d; want it growing past one replica's capacity", tc.rate, queue)
		}
	}
}

// TestSubmitNotifyReportsEachRequest: the per-request callback hears the
// same TTFT as the engine-wide hook, once per request.
func TestSubmitNotifyReportsEachRequest(t *testing.T) {
	e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
	if err != nil {
		t.Fatal(err)
	}
	var hooked []time.Duration
	e.SetHooks(Hooks{FirstToken: func(d time.Duration) { hooked = append(hooked, d) }})
	got := map[int][]time.Duration{}
	for i := range 20 {
		// Twenty requests at once queue up, so their TTFTs differ.
		err := e.SubmitNotify(t0, Request{ContextTokens: 4000, GeneratedTokens: 10}, func(d time.Duration) { got[i] = append(got[i], d) })
		if err != nil {
			t.Fatal(err)
		}
	}
	e.Advance(t0.Add(time.Minute))
	if len(got) != 20 || len(hooked) != 20 {
		t.Fatalf("%d requests notified, hook saw %d; want 20 each", len(got), len(hooked))
	}
	for i := range 20 {
		if len(got[i]) != 1 || got[i][0] != hooked[i] {
			t.Errorf("request %d: notified %v, hook saw %v (FIFO order)", i, got[i], hooked[i])
		}
	}
	if got[19][0] <= got[0][0] {
		t.Errorf("last TTFT %v not above first %v: the queue did not show", got[19][0], got[0][0])
	}
}
