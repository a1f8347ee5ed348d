package offlinereplay

import (
	"errors"
	"math"
	"sort"
	"time"

	"github.com/gpuscale/gpuscale/internal/bench/trace"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// SequentialNeed is, for each trace minute, the fewest replicas (up to
// limit) that meet the SLO in it when every earlier minute ran on the
// replicas this search chose for it: a fleet that follows the load, each
// minute's replicas Ready as it starts. MinuteNeed's fleet is one count
// for the whole trace, so where a burst outruns it the backlog spills
// into the minutes after and reads as their need; here the minutes after
// a burst inherit only what the burst's own fleet left. A replica removed
// at a minute's end serves what it holds for the usual grace. It is the
// need a reference that knows the future would ask for; it takes a replay
// of each minute's prefix per count tried.
func SequentialNeed(reqs []trace.Request, prof inferencesim.Profile, slo time.Duration, limit int) ([]int, error) {
	if len(reqs) == 0 {
		return nil, errors.New("offlinereplay: no requests")
	}
	if limit < 1 {
		return nil, errors.New("offlinereplay: a limit of at least one replica")
	}
	minutes := int(reqs[len(reqs)-1].At/time.Minute) + 1
	need := make(minuteSchedule, 0, minutes)
	for m := range minutes {
		// Later arrivals cannot change minute m's first tokens by much
		// (admission is first come, first served): the replay stops
		// with the minute.
		end := sort.Search(len(reqs), func(i int) bool { return reqs[i].At >= time.Duration(m+1)*time.Minute })
		if end == 0 || reqs[end-1].At < time.Duration(m)*time.Minute {
			need = append(need, 1) // no arrivals: nothing to meet, as in MinuteNeed
			continue
		}
		chosen := limit
		for n := 1; n < limit; n++ {
			sched := append(need[:m:m], n)
			res, err := Run(Config{Requests: reqs[:end], Profile: prof, SLO: slo, Initial: sched[0], Policy: sched,
				Behavior: Unlimited(1, limit), Scrape: 5 * time.Second, Sync: time.Second, Grace: 30 * time.Second})
			if err != nil {
				return nil, err
			}
			if m < len(res.MetMinute) && (res.MetMinute[m] || math.IsNaN(res.P90[m])) {
				chosen = n
				break
			}
		}
		need = append(need, chosen)
	}
	return need, nil
}

// minuteSchedule is a fleet by trace minute: at each sync it asks for its
// minute's replicas (the last minute's past its end).
type minuteSchedule []int

func (s minuteSchedule) Recommend(v View) (int, bool) {
	m := int(v.Now.Sub(origin) / time.Minute)
	return s[min(max(m, 0), len(s)-1)], true
}
