package offlinereplay

import (
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

func TestHPADecide(t *testing.T) {
	at := func(s int) time.Time { return origin.Add(time.Duration(s) * time.Second) }
	up := []Rate{Percent(100, 15*time.Second), Pods(4, 15*time.Second)}
	recommended := Behavior{Up: up, DownWindow: 60 * time.Second, Down: []Rate{Pods(1, time.Minute)}, MinReplicas: 1, MaxReplicas: 18}
	tests := []struct {
		name  string
		b     Behavior
		start int
		steps []struct{ at, want, got int }
	}{
		{
			// Up by the larger of 100% and 4 pods per 15 s.
			name: "scale-up rate", b: DefaultBehavior(1, 18), start: 2,
			steps: []struct{ at, want, got int }{{15, 18, 6}, {20, 18, 6}, {30, 18, 12}, {45, 18, 18}},
		},
		{
			// The HPA's first down window holds its starting replicas.
			name: "seeded down window", b: DefaultBehavior(1, 18), start: 8,
			steps: []struct{ at, want, got int }{{15, 2, 8}, {290, 2, 8}, {301, 2, 2}},
		},
		{
			// One pod a minute down, once the 60 s window has passed.
			name: "recommended scale-down", b: recommended, start: 6,
			steps: []struct{ at, want, got int }{{61, 3, 5}, {76, 3, 5}, {121, 3, 4}, {181, 3, 3}},
		},
		{
			// Pods and percent together: the larger change (selectPolicy
			// Max), each relative to the replicas at the period's start; a
			// percent down truncates, as the controller's int32() does.
			name: "pods or percent down", b: Behavior{Up: up, DownWindow: 60 * time.Second,
				Down: []Rate{Pods(1, time.Minute), Percent(25, time.Minute)}, MinReplicas: 1, MaxReplicas: 40},
			start: 20,
			steps: []struct{ at, want, got int }{{61, 3, 15}, {76, 3, 15}, {121, 3, 11}, {181, 3, 8}, {241, 3, 6}, {301, 3, 4}, {361, 3, 3}},
		},
		{
			// Each policy has its own period: 1 pod a minute or 50% per
			// 3 minutes, whichever removes more.
			name: "periods of their own", b: Behavior{Up: up, Down: []Rate{Pods(1, time.Minute), Percent(50, 3*time.Minute)}, MinReplicas: 1, MaxReplicas: 40},
			start: 20,
			steps: []struct{ at, want, got int }{{15, 1, 10}, {30, 1, 10}, {75, 1, 9}, {135, 1, 8}, {195, 1, 5}},
		},
		{
			// The controller's period start undoes the changes of both
			// directions within the period (currentReplicas -
			// replicasAdded + replicasDeleted), so a scale-up just before
			// widens the scale-down that follows it.
			name: "a scale-up within the down period", b: Behavior{Up: []Rate{Pods(4, 15*time.Second)}, Down: []Rate{Pods(1, time.Minute)}, MinReplicas: 1, MaxReplicas: 40},
			start: 2,
			steps: []struct{ at, want, got int }{{15, 6, 6}, {30, 1, 1}},
		},
		{
			name: "bounds", b: recommended, start: 2,
			steps: []struct{ at, want, got int }{{15, 40, 6}, {30, 40, 12}, {45, 40, 18}, {60, 0, 18}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHPA(tt.b, tt.start)
			for _, s := range tt.steps {
				if got := h.decide(at(s.at), s.want); got != s.got {
					t.Fatalf("at %ds asking %d: %d replicas, want %d", s.at, s.want, got, s.got)
				}
			}
		})
	}
}

// TestStaticAgreesWithStaticNeed: with no policy the replay is the bench's
// offline sizing, so the fewest replicas StaticNeed finds meet as many
// minutes here.
func TestStaticAgreesWithStaticNeed(t *testing.T) {
	tr, err := trace.ReadFile("../../../test/traces/azure-llm-inference-2023-conv.csv")
	if err != nil {
		t.Fatal(err)
	}
	reqs := tr.Slice(40*time.Minute, 4*time.Minute)
	prof := inferencesim.L4Profile()
	n, met, minutes, err := autoscalebench.StaticNeed(reqs, prof, time.Second, 16)
	if err != nil {
		t.Fatal(err)
	}
	for _, replicas := range []int{n, n - 1} {
		res, err := Run(Config{Requests: reqs, Profile: prof, SLO: time.Second, Initial: replicas, Scrape: 5 * time.Second, Sync: 15 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.MetMinute) != minutes || res.Unserved != 0 {
			t.Fatalf("%d replicas: %d minutes, %d unserved; want %d minutes, none unserved", replicas, len(res.MetMinute), res.Unserved, minutes)
		}
		if replicas == n && res.MinutesMet != met {
			t.Errorf("%d replicas meet %d minutes, StaticNeed says %d", n, res.MinutesMet, met)
		}
		if replicas < n && res.MinutesMet >= met {
			t.Errorf("%d replicas meet %d minutes: StaticNeed's %d is not the fewest", replicas, res.MinutesMet, n)
		}
		want := 4 * 60 * float64(replicas)
		if got := res.ReplicaSeconds; got < want || got > want+60*float64(replicas) {
			t.Errorf("%d replicas billed %v s, want about %v", replicas, got, want)
		}
	}
}

// TestPolicyScalesAndBills: a policy's replicas load before they serve,
// and a removed replica is billed until it has drained.
func TestPolicyScalesAndBills(t *testing.T) {
	reqs := make([]trace.Request, 0, 600)
	for i := range 600 {
		reqs = append(reqs, trace.Request{At: time.Duration(i) * 500 * time.Millisecond, ContextTokens: 500, GeneratedTokens: 50})
	}
	cfg := Config{Requests: reqs, Profile: inferencesim.L4Profile(), SLO: time.Second, ModelLoad: time.Minute, Grace: 30 * time.Second,
		Initial: 1, Scrape: 5 * time.Second, Sync: 15 * time.Second, SyncPhase: 15 * time.Second,
		Behavior: DefaultBehavior(1, 4), Policy: fixed(3)}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Ups != 1 || res.Downs != 0 || res.Peak != 3 || res.Unserved != 0 {
		t.Fatalf("ups %d downs %d peak %d unserved %d, want 1 0 3 0", res.Ups, res.Downs, res.Peak, res.Unserved)
	}
	if res.Ready[0] != 1 || res.Ready[len(res.Ready)-1] != 3 {
		t.Errorf("Ready %v: the two new replicas should load for a minute", res.Ready)
	}
	// 300 s of one replica, 285 s of two more.
	if got, want := res.ReplicaSeconds, 300+2*285.0; got < want-2 || got > want+2 {
		t.Errorf("billed %v replica-seconds, want %v", got, want)
	}
}

type fixed int

func (f fixed) Recommend(View) (int, bool) { return int(f), true }

// TestRejectedCountedApart: a request no replica can hold is rejected as
// vLLM rejects it, counted apart from the unserved, and the replay goes on.
func TestRejectedCountedApart(t *testing.T) {
	p := inferencesim.L4Profile()
	var reqs []trace.Request
	for i := range 120 {
		r := trace.Request{At: time.Duration(i) * time.Second, ContextTokens: 500, GeneratedTokens: 50}
		if i%10 == 0 {
			r.ContextTokens = 2 * p.KVCacheTokens
		}
		reqs = append(reqs, r)
	}
	res, err := Run(Config{Requests: reqs, Profile: p, SLO: time.Second, Initial: 2, Scrape: 5 * time.Second, Sync: 15 * time.Second, Grace: 30 * time.Second})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if res.Rejected != 12 || res.Unserved != 0 || res.MinutesMet != 2 {
		t.Errorf("rejected %d, unserved %d, minutes met %d; want 12, 0 and both minutes", res.Rejected, res.Unserved, res.MinutesMet)
	}
}
