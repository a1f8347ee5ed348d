package autoscalebench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// DisaggRecording is one disaggregated replay under several policies.
type DisaggRecording struct {
	Workload string
	// Duration is the slice billed, Speedup how much faster than real
	// time it ran, SLO and ITLSLO the objectives a minute is judged on.
	Duration    time.Duration
	Speedup     float64
	SLO, ITLSLO time.Duration
	// Static is each pool's static size; Setup says what ran.
	Static   [2]int
	Setup    string
	Policies []DisaggPolicyRecording
}

// DisaggPolicyRecording is one policy's run: its requests (the TTFT a user
// sees) and both pools' samples together, each pool's samples, and the
// ITL p90 (seconds, nearest rank over every token gap of the requests
// arriving in the minute; NaN without gaps) of each trace minute.
type DisaggPolicyRecording struct {
	PolicyRecording
	Pools  [2][]Sample
	ITLP90 []JSONFloat
	// Capacity are the adapter's capacity estimates each pool's HPA
	// read, every HPA sync: its Deployment's (per-role) or the model's
	// (single-pool, the same for both pools); none for static.
	PoolCapacity [2][]CapacityParts `json:",omitempty"`
}

// recording assembles the results.
func (p *DisaggPlan) recording(runs []*disaggRun) *DisaggRecording {
	rec := &DisaggRecording{
		Workload: p.Workload, Duration: p.Duration, Speedup: p.Speedup, SLO: p.SLO, ITLSLO: p.ITLSLO, Static: p.Static,
		Setup: fmt.Sprintf("%s replicas in both pools, model load %v, KV caches moved in %v for 1,000 prompt tokens; autoscaled pools start at %d prefill and %d decode; "+
			"drain (preStop sleep, --shutdown-timeout) %v and %v prefill, %v and %v decode",
			p.Profile, p.ModelLoad, p.Transfer(1000).Round(time.Millisecond), p.Initial[0], p.Initial[1],
			p.Drain[0].Wait.PreStop, p.Drain[0].Wait.ShutdownTimeout, p.Drain[1].Wait.PreStop, p.Drain[1].Wait.ShutdownTimeout),
	}
	for _, r := range runs {
		r.mu.Lock()
		itl := make([]JSONFloat, len(r.gaps))
		for m, g := range r.gaps {
			slices.Sort(g)
			itl[m] = JSONFloat(math.NaN())
			if len(g) > 0 {
				itl[m] = JSONFloat(g[max(0, int(math.Ceil(0.9*float64(len(g))))-1)])
			}
		}
		rec.Policies = append(rec.Policies, DisaggPolicyRecording{
			PolicyRecording: PolicyRecording{Policy: r.policy, Describe: r.describe,
				Requests: slices.Clone(r.outcomes), Samples: slices.Clone(r.samples)},
			Pools:        [2][]Sample{slices.Clone(r.pools[0]), slices.Clone(r.pools[1])},
			ITLP90:       itl,
			PoolCapacity: [2][]CapacityParts{slices.Clone(r.capacity[0]), slices.Clone(r.capacity[1])},
		})
		r.mu.Unlock()
	}
	return rec
}

// DisaggSummary is what one policy's disaggregated run measured.
type DisaggSummary struct {
	Policy string
	// MinutesMet are the minutes within both objectives, TTFTMet and
	// ITLMet those within each, of Minutes with arrivals. A minute
	// without token gaps misses no ITL.
	MinutesMet, TTFTMet, ITLMet, Minutes int
	// GPUHours is both pools' bill, PoolGPUHours each pool's, Share its
	// ratio to static's measured bill.
	GPUHours     float64
	PoolGPUHours [2]float64
	Share        float64
	// PoolPeak is each pool's most pods.
	PoolPeak [2]int
	// Unserved requests never had a first token; Rejected were refused
	// (no replica holds them); AbortedStreams were cut after their first
	// token by a removed replica.
	Unserved, Rejected, AbortedStreams int
	// ScaleUps and ScaleDowns count the samples at which either pool's
	// desired replicas rose, or fell.
	ScaleUps, ScaleDowns int
}

// SummarizeDisagg returns one summary per policy, in rec's order; static's
// bill is the one the shares are of.
func SummarizeDisagg(rec DisaggRecording) []DisaggSummary {
	var static float64
	for _, p := range rec.Policies {
		if p.Policy == DisaggStatic {
			static = GPUSeconds(p.Samples, rec.Duration)
		}
	}
	out := make([]DisaggSummary, 0, len(rec.Policies))
	for _, p := range rec.Policies {
		s := DisaggSummary{Policy: p.Policy}
		for _, r := range p.Requests {
			switch {
			case r.Rejected:
				s.Rejected++
			case !r.Served:
				s.Unserved++
			case r.Aborted:
				s.AbortedStreams++
			}
		}
		ttft := MinuteP90(p.PolicyRecording, rec.Duration)
		for m, v := range ttft {
			if math.IsNaN(v) {
				continue
			}
			s.Minutes++
			ttftOK := v <= rec.SLO.Seconds()
			itlOK := m >= len(p.ITLP90) || math.IsNaN(float64(p.ITLP90[m])) || float64(p.ITLP90[m]) <= rec.ITLSLO.Seconds()
			if ttftOK {
				s.TTFTMet++
			}
			if itlOK {
				s.ITLMet++
			}
			if ttftOK && itlOK {
				s.MinutesMet++
			}
		}
		seconds := GPUSeconds(p.Samples, rec.Duration)
		s.GPUHours, s.Share = seconds/3600, ratio(seconds, static)
		for k := range p.Pools {
			s.PoolGPUHours[k] = GPUSeconds(p.Pools[k], rec.Duration) / 3600
			for _, smp := range p.Pools[k] {
				s.PoolPeak[k] = max(s.PoolPeak[k], smp.Pods)
			}
		}
		s.ScaleUps, s.ScaleDowns = poolEvents(p.Pools)
		out = append(out, s)
	}
	return out
}

// poolEvents counts the samples at which either pool's desired replicas
// rose, and those at which either fell.
func poolEvents(pools [2][]Sample) (ups, downs int) {
	n := min(len(pools[0]), len(pools[1]))
	for i := 1; i < n; i++ {
		var up, down bool
		for k := range pools {
			d := pools[k][i].Desired - pools[k][i-1].Desired
			up, down = up || d > 0, down || d < 0
		}
		if up {
			ups++
		}
		if down {
			downs++
		}
	}
	return ups, downs
}

// DisaggTable is the summaries as a markdown table, in the columns of the
// offline replay's (offlinereplay.DisaggTable), with the streams cut and
// the scale events.
func DisaggTable(rec DisaggRecording, sums []DisaggSummary) string {
	var b strings.Builder
	b.WriteString("| policy | minutes met (TTFT and ITL) | TTFT met | ITL met | GPU-hours (prefill + decode) | of static's | peak replicas (prefill, decode) | unserved | streams cut | scale events (up, down) |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		name := s.Policy
		if name == DisaggStatic {
			name = fmt.Sprintf("static (%d prefill, %d decode)", rec.Static[0], rec.Static[1])
		}
		fmt.Fprintf(&b, "| %s | %d/%d | %d | %d | %.2f (%.2f + %.2f) | %s | %d, %d | %d | %d | %d, %d |\n",
			name, s.MinutesMet, s.Minutes, s.TTFTMet, s.ITLMet, s.GPUHours, s.PoolGPUHours[0], s.PoolGPUHours[1],
			fmtPercent(s.Share), s.PoolPeak[0], s.PoolPeak[1], s.Unserved, s.AbortedStreams, s.ScaleUps, s.ScaleDowns)
	}
	return b.String()
}

// WriteDisaggReport creates dir and writes report.md (the table, the
// setup and each policy's description) and recording.json.
func WriteDisaggReport(dir string, rec DisaggRecording) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# Disaggregated replay: %s\n\n%v of trace at %vx, judged at TTFT p90 %v and ITL p90 %v. %s.\n\n",
		rec.Workload, rec.Duration.Round(time.Second), rec.Speedup, rec.SLO, rec.ITLSLO, rec.Setup)
	b.WriteString(DisaggTable(rec, SummarizeDisagg(rec)))
	b.WriteString("\n")
	for _, p := range rec.Policies {
		fmt.Fprintf(&b, "- **%s**: %s\n", p.Policy, mdEscape(p.Describe))
	}
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	raw, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "recording.json"), raw, 0o644)
}
