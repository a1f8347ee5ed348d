package offlinereplay

import (
	"math"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace/tracetest"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// TestSequentialNeedFollowsItsOwnFleet: the minutes after a burst need what
// the burst's own fleet leaves them, not the backlog a smaller fleet held
// through the burst would (MinuteNeed's reading), and the schedule of
// needs, replayed, meets every minute.
func TestSequentialNeedFollowsItsOwnFleet(t *testing.T) {
	reqs, prof, slo, limit := tracetest.BurstThenQuiet(), inferencesim.L4Profile(), time.Second, 20
	seq, err := SequentialNeed(reqs, prof, slo, limit)
	if err != nil {
		t.Fatal(err)
	}
	static, err := MinuteNeed(reqs, prof, slo, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("sequential %v, static fleet over the whole trace %v", seq, static)
	if len(seq) != 5 || len(static) != 5 {
		t.Fatalf("needs for %d and %d minutes, want 5", len(seq), len(static))
	}
	if seq[0] >= limit || seq[0] < 2 {
		t.Errorf("the burst's first minute needs %d, want more than one replica and fewer than the limit %d", seq[0], limit)
	}
	for m := 2; m < 5; m++ {
		if seq[m] > static[m] {
			t.Errorf("minute %d after the burst: sequential need %d over the static fleet's %d", m, seq[m], static[m])
		}
	}
	if seq[2] >= static[2] {
		t.Errorf("the first quiet minute: sequential need %d, want less than the static fleet's %d (the backlog a small fleet carries out of the burst)", seq[2], static[2])
	}
	res, err := Run(Config{Requests: reqs, Profile: prof, SLO: slo, Initial: seq[0], Policy: minuteSchedule(seq),
		Behavior: Unlimited(1, limit), Scrape: 5 * time.Second, Sync: time.Second, Grace: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for m, met := range res.MetMinute {
		if !met && !math.IsNaN(res.P90[m]) {
			t.Errorf("minute %d missed (p90 %.2fs) on the schedule %v", m, res.P90[m], seq)
		}
	}
}
