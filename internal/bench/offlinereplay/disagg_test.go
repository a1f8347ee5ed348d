package offlinereplay_test

import (
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/autoscalebench"
	"github.com/gpuscale/gpuscale/internal/bench/offlinereplay"
	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/internal/bench/workload"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

// TestDisaggregatedGoal is issue #29's goal on the whole disaggregated
// workload (workload.Disaggregated, 45 minutes, in virtual time), at three
// HPA sync phases, since the real controller's falls anywhere: the
// per-role policy meets the TTFT and the ITL objectives in at least 90% of
// the minutes static provisioning meets, at no more than 80% of static's
// GPU-hours, and meets at least as many minutes as the single-pool policy
// for fewer GPU-hours: outright at the replay's default phase, and at the
// others wherever single-pool meets the goal's minutes (where it does not,
// it can cost less by serving less).
func TestDisaggregatedGoal(t *testing.T) {
	reqs := workload.Disaggregated().Generate(2026)
	for _, tc := range []struct {
		phase    time.Duration
		outright bool
	}{
		{2 * time.Second, false},
		{7 * time.Second, true},
		{12 * time.Second, false},
	} {
		t.Run(tc.phase.String(), func(t *testing.T) {
			b := offlinereplay.NewDisaggBench(reqs, 2*time.Second, 150*time.Millisecond)
			b.Config.SyncPhase = tc.phase
			static, out, err := b.Run()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", offlinereplay.DisaggTable(static, out))
			by := map[string]offlinereplay.DisaggOutcome{}
			for _, o := range out {
				by[o.Policy] = o
			}
			st, role, single := by[offlinereplay.DisaggStatic], by[offlinereplay.DisaggPerRole], by[offlinereplay.DisaggSinglePool]
			if st.Result.MinutesMet == 0 || role.Policy == "" || single.Policy == "" {
				t.Fatalf("outcomes: %+v", out)
			}
			meets := func(o offlinereplay.DisaggOutcome) bool { return 10*o.Result.MinutesMet >= 9*st.Result.MinutesMet }
			if !meets(role) {
				t.Errorf("per-role met both objectives in %d minutes, under 90%% of static's %d", role.Result.MinutesMet, st.Result.MinutesMet)
			}
			if role.Share > 0.8 {
				t.Errorf("per-role billed %.2f GPU-hours, %.1f%% of static's %.2f (want <= 80%%)", role.GPUHours, 100*role.Share, st.GPUHours)
			}
			if role.Result.MinutesMet < single.Result.MinutesMet || ((tc.outright || meets(single)) && role.GPUHours >= single.GPUHours) {
				t.Errorf("per-role: %d minutes for %.2f GPU-hours; single-pool: %d for %.2f (want no fewer minutes, and fewer GPU-hours where single-pool meets the goal's minutes or outright: %v)",
					role.Result.MinutesMet, role.GPUHours, single.Result.MinutesMet, single.GPUHours, tc.outright)
			}
			if role.Result.ITLMet < role.Result.TTFTMet || role.Result.Unserved != 0 {
				t.Errorf("per-role: ITL met in %d minutes, TTFT in %d, %d unserved", role.Result.ITLMet, role.Result.TTFTMet, role.Result.Unserved)
			}
		})
	}
}

// TestDisaggLoopInputs: the replay hands every pool's TTFT histograms to
// the estimators, as the adapter does, so the single-pool signal's closed
// loop measures and corrects as on the real HPA controller, while each
// role's pool measures its part of the time to first token and holds its
// loop open (provider.RoleCapacityConfig).
func TestDisaggLoopInputs(t *testing.T) {
	tr := trace.Trace{Requests: workload.Disaggregated().Generate(2026)}
	b := offlinereplay.NewDisaggBench(tr.Slice(5*time.Minute, 15*time.Minute), 2*time.Second, 150*time.Millisecond)
	measured := map[string]int{}
	corrected := map[string]int{}
	b.Parts = func(policy string, _ time.Time, pool string, e capacity.Estimate) {
		key := policy + "/" + pool
		if e.MeasuredTTFT > 0 {
			measured[key]++
		}
		if e.Correction != 1 {
			corrected[key]++
		}
	}
	if _, _, err := b.Run(); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"single-pool/model", "per-role/prefill", "per-role/decode"} {
		if measured[key] == 0 {
			t.Errorf("%s: no estimate measured a TTFT quantile (measured %v)", key, measured)
		}
	}
	if corrected["single-pool/model"] == 0 {
		t.Errorf("single-pool: the closed loop never corrected (corrected %v)", corrected)
	}
	for _, key := range []string{"per-role/prefill", "per-role/decode"} {
		if corrected[key] != 0 {
			t.Errorf("%s: %d estimates corrected by the closed loop, want none", key, corrected[key])
		}
	}
}

// TestRunDisaggKVTransfer: a request's time to first token is its prefill,
// its KV cache's transfer and its first decode step; a decode replica
// pulls one cache at a time, so a second request handed to it at once
// waits for the first's cache.
func TestRunDisaggKVTransfer(t *testing.T) {
	const tokens = 1000
	slow := offlinereplay.KVTransfer{BytesPerToken: 1000, BytesPerSecond: 1e6} // a millisecond a token
	perCache := time.Duration(tokens) * time.Millisecond
	for _, tc := range []struct {
		name     string
		requests int
		// The p90's increase over an instant transfer: a cache's time
		// for one request; for the later of two, its own cache's after
		// the first's, less the time the prefill finished it after the
		// first (within the one prefill batch).
		least, most time.Duration
	}{
		{"one request", 1, perCache - 5*time.Millisecond, perCache + 5*time.Millisecond},
		{"two at once, one link", 2, perCache + 5*time.Millisecond, 2*perCache + 5*time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var reqs []trace.Request
			for range tc.requests {
				reqs = append(reqs, trace.Request{At: 100 * time.Millisecond, ContextTokens: tokens, GeneratedTokens: 20})
			}
			run := func(k offlinereplay.KVTransfer) offlinereplay.DisaggResult {
				r, err := offlinereplay.RunDisagg(offlinereplay.DisaggConfig{Requests: reqs, Profile: inferencesim.L4Profile(),
					SLO: 10 * time.Second, ITLSLO: time.Second, Transfer: k, Initial: [2]int{1, 1},
					Scrape: 5 * time.Second, Sync: 15 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if r.Unserved != 0 || len(r.P90) != 1 || math.IsNaN(r.P90[0]) {
					t.Fatalf("result %+v", r)
				}
				return r
			}
			instant, over := run(offlinereplay.KVTransfer{}), run(slow)
			got := time.Duration((over.P90[0] - instant.P90[0]) * float64(time.Second))
			if got < tc.least || got > tc.most {
				t.Errorf("TTFT p90 %.3fs with the transfer, %.3fs without: %v more, want %v to %v", over.P90[0], instant.P90[0], got, tc.least, tc.most)
			}
			if over.PrefillP90[0] != instant.PrefillP90[0] || over.PrefillP90[0] <= 0 {
				t.Errorf("prefill part %v with the transfer, %v without: the transfer is after the prefill", over.PrefillP90[0], instant.PrefillP90[0])
			}
			if over.ITLP90[0] <= 0 || over.ITLMet != 1 {
				t.Errorf("ITL p90 %v, minutes within the ITL objective %d", over.ITLP90[0], over.ITLMet)
			}
		})
	}
}

// TestLiveMatchesOffline pins the live bench's setup to the offline
// replay's: the profile by name is the one replayed, and the pools, the
// objectives and the transfer are the same.
func TestLiveMatchesOffline(t *testing.T) {
	reqs := []trace.Request{{At: 0, ContextTokens: 800, GeneratedTokens: 10}}
	b := offlinereplay.NewDisaggBench(reqs, 2*time.Second, 150*time.Millisecond)
	live := b.Live("w", [2]int{3, 4}, 6)
	p, err := inferencesim.ProfileByName(live.Profile)
	if err != nil {
		t.Fatal(err)
	}
	if p != b.Config.Profile {
		t.Errorf("live profile %q is %+v, the offline replay runs %+v", live.Profile, p, b.Config.Profile)
	}
	if live.SLO != b.Config.SLO || live.ITLSLO != b.Config.ITLSLO || live.ModelLoad != b.Config.ModelLoad {
		t.Errorf("objectives or load differ: live %v/%v/%v, offline %v/%v/%v", live.SLO, live.ITLSLO, live.ModelLoad, b.Config.SLO, b.Config.ITLSLO, b.Config.ModelLoad)
	}
	if got, want := live.Transfer(1100), b.Config.Transfer.Time(1100); got != want || got <= 0 {
		t.Errorf("transfer of 1,100 tokens: live %v, offline %v", got, want)
	}
	if live.Initial != b.InitialPools || live.MaxReplicas != [2]int{3, 4} || live.Static != [2]int{3, 4} {
		t.Errorf("pools: initial %v, max %v, static %v", live.Initial, live.MaxReplicas, live.Static)
	}
	if _, err := autoscalebench.NewDisaggPlan(live); err != nil {
		t.Errorf("the live setup is not a plan: %v", err)
	}
}

// TestDisaggLost: the lost-minutes report names the minutes static meets
// and a policy misses, with each pool's replicas after the minute's last
// sync, and nothing for a minute static misses too.
func TestDisaggLost(t *testing.T) {
	b := offlinereplay.DisaggBench{Config: offlinereplay.DisaggConfig{Sync: 15 * time.Second, SyncPhase: 7 * time.Second}}
	static := offlinereplay.DisaggResult{Result: offlinereplay.Result{MetMinute: []bool{true, true, false}, MinutesMet: 2}}
	pol := offlinereplay.DisaggResult{
		Result:     offlinereplay.Result{MetMinute: []bool{true, false, false}, P90: []float64{1, 2.4, 9}},
		PrefillP90: []float64{0.5, 2.01, 8},
		ITLP90:     []float64{0.08, 0.09, 0.1},
	}
	// Syncs at 7, 22, 37, 52 s (minute 0), 67, 82, 97, 112 s (minute 1), ...
	pol.PoolDesired[offlinereplay.Prefill] = []int{2, 2, 2, 2, 3, 4, 5, 6, 7}
	pol.PoolDesired[offlinereplay.Decode] = []int{3, 3, 3, 3, 3, 3, 4, 5, 5}
	got := b.Lost([]offlinereplay.DisaggOutcome{{Policy: "static", Result: static}, {Policy: "per-role", Result: pol}})
	want := "per-role: 1 of static's 2 minutes lost\n" +
		"  minute  1: TTFT p90 2.40s (prefill 2.01s), ITL p90 90ms, replicas prefill 6 decode 5\n"
	if got != want {
		t.Errorf("Lost:\n%q\nwant\n%q", got, want)
	}
}

// TestDisaggBehaviors: each pool's HPA gets `adapter recommend`'s advice
// for the signal it reads: a role's pool, its loop held open, one removal
// per signal window; single-pool's HPAs, on the model's signal with its
// loop closed, the stabilization window after it.
func TestDisaggBehaviors(t *testing.T) {
	o := offlinereplay.DisaggOptions{Capacity: capacity.DefaultConfig(), Startup: 63 * time.Second, MaxReplicas: [2]int{12, 16}}
	for _, tc := range []struct {
		policy string
		closed bool
	}{{offlinereplay.DisaggPerRole, false}, {offlinereplay.DisaggSinglePool, true}} {
		_, b, err := offlinereplay.NewDisaggPolicy(tc.policy, o)
		if err != nil {
			t.Fatal(err)
		}
		for pl := range len(b) {
			want := time.Minute
			if tc.closed {
				want += b[pl].DownWindow
			}
			rates := []offlinereplay.Rate{offlinereplay.Pods(1, want), offlinereplay.Percent(10, want)}
			if b[pl].DownWindow != 75*time.Second || !slices.Equal(b[pl].Down, rates) || b[pl].MaxReplicas != o.MaxReplicas[pl] {
				t.Errorf("%s, %s pool: window %v, rates %+v, max %d; want 75s, one replica or 10%% per %v, max %d",
					tc.policy, offlinereplay.Pool(pl), b[pl].DownWindow, b[pl].Down, b[pl].MaxReplicas, want, o.MaxReplicas[pl])
			}
		}
	}
}
