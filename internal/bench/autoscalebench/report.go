package autoscalebench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Summary is what one policy did to latency and to the GPU bill over the
// replayed slice.
//
// TTFT quantiles are nearest-rank over every request of the policy: the
// p-th percentile is the ceil(p*n/100)-th smallest TTFT. Nearest rank never
// interpolates, so a quantile is always a TTFT some request saw, and an
// unserved request (TTFT +Inf) can be reported honestly as +Inf instead of
// being averaged into a finite number. A quantile is NaN when the policy
// has no requests.
type Summary struct {
	Policy   string
	Describe string

	// TTFTP50, TTFTP90 and TTFTP99 are in seconds.
	TTFTP50, TTFTP90, TTFTP99 float64
	Served, Unserved          int
	// Rejected counts the requests no replica could hold
	// (RequestOutcome.Rejected), outside the quantiles and minutes.
	Rejected int
	// Aborted counts the requests a deleted replica killed before their
	// last token (RequestOutcome.Aborted); AbortedStreams those of them
	// that were streaming (served), the others being unserved as well.
	Aborted, AbortedStreams int

	// MinutesMet of Minutes trace minutes had a TTFT p90 within the SLO;
	// minutes without arrivals count in neither. MinutesMetShare is their
	// ratio, NaN when Minutes is 0.
	MinutesMet, Minutes int
	MinutesMetShare     float64

	// GPUSeconds integrates Sample.GPUs over trace time (GPUSeconds);
	// GPUHours is the same in hours. StaticFraction divides it by the
	// static-peak bill (StaticReplicas of GPUsPerReplica GPUs for the
	// whole slice), NaN when that bill is 0.
	GPUSeconds, GPUHours float64
	StaticFraction       float64

	// ScaleUps and ScaleDowns count consecutive samples whose Desired
	// rose or fell: how often the autoscaler changed its mind.
	ScaleUps, ScaleDowns int
	// PeakReplicas is the most pods held at once, PeakDesired the most
	// replicas asked for.
	PeakReplicas, PeakDesired int
}

// Summarize returns one Summary per policy, in rec.Policies order.
func Summarize(rec Recording) []Summary {
	out := make([]Summary, 0, len(rec.Policies))
	for _, p := range rec.Policies {
		out = append(out, summarize(rec, p))
	}
	return out
}

func summarize(rec Recording, p PolicyRecording) Summary {
	s := Summary{Policy: p.Policy, Describe: p.Describe}
	ttfts := make([]float64, 0, len(p.Requests))
	for _, r := range p.Requests {
		if r.Rejected {
			s.Rejected++
			continue
		}
		ttfts = append(ttfts, ttftSeconds(r))
		if r.Aborted {
			s.Aborted++
			if r.Served {
				s.AbortedStreams++
			}
		}
		if r.Served {
			s.Served++
		} else {
			s.Unserved++
		}
	}
	slices.Sort(ttfts)
	s.TTFTP50 = nearestRank(ttfts, 50)
	s.TTFTP90 = nearestRank(ttfts, 90)
	s.TTFTP99 = nearestRank(ttfts, 99)

	s.MinutesMet, s.Minutes = sloMinutes(MinuteP90(p, rec.Duration), rec.SLO)
	s.MinutesMetShare = ratio(float64(s.MinutesMet), float64(s.Minutes))

	s.GPUSeconds = GPUSeconds(p.Samples, rec.Duration)
	s.GPUHours = s.GPUSeconds / 3600
	s.StaticFraction = ratio(s.GPUSeconds, float64(rec.StaticReplicas*max(rec.GPUsPerReplica, 1))*rec.Duration.Seconds())

	s.ScaleUps, s.ScaleDowns = scaleEvents(p.Samples)
	for _, smp := range p.Samples {
		s.PeakReplicas = max(s.PeakReplicas, smp.Pods)
		s.PeakDesired = max(s.PeakDesired, smp.Desired)
	}
	return s
}

// ttftSeconds is the request's TTFT, +Inf when it was never served, so
// that sorting puts unserved requests after every served one.
func ttftSeconds(r RequestOutcome) float64 {
	if !r.Served {
		return math.Inf(1)
	}
	return r.TTFT.Seconds()
}

// nearestRank returns the p-th percentile (0 < p <= 100) of sorted by the
// nearest-rank definition, NaN when sorted is empty. The rank is computed
// in integers so that, say, p90 of 10 values is exactly the 9th.
func nearestRank(sorted []float64, p int) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	rank := max((p*n+99)/100, 1)
	return sorted[min(rank, n)-1]
}

func ratio(num, den float64) float64 {
	if den <= 0 {
		return math.NaN()
	}
	return num / den
}

// BucketP90 returns the nearest-rank TTFT p90, in seconds, of the requests
// arriving in each bucket [i*bucket, (i+1)*bucket) of [0, duration). The
// last bucket may be partial. A bucket is +Inf when its p90 falls on an
// unserved request and NaN when nothing arrived in it. Requests arriving
// outside [0, duration) belong to no bucket.
func BucketP90(p PolicyRecording, duration, bucket time.Duration) []float64 {
	if duration <= 0 || bucket <= 0 {
		return nil
	}
	buckets := make([][]float64, (duration+bucket-1)/bucket)
	for _, r := range p.Requests {
		if r.Arrival < 0 || r.Arrival >= duration || r.Rejected {
			continue
		}
		i := r.Arrival / bucket
		buckets[i] = append(buckets[i], ttftSeconds(r))
	}
	out := make([]float64, len(buckets))
	for i, b := range buckets {
		slices.Sort(b)
		out[i] = nearestRank(b, 90)
	}
	return out
}

// MinuteP90 is BucketP90 per trace minute: the series the SLO is judged on.
func MinuteP90(p PolicyRecording, duration time.Duration) []float64 {
	return BucketP90(p, duration, time.Minute)
}

// sloMinutes counts the minutes whose p90 is within slo (met) among those
// that had arrivals (total). Unserved (+Inf) never meets it.
func sloMinutes(p90s []float64, slo time.Duration) (met, total int) {
	for _, v := range p90s {
		if math.IsNaN(v) {
			continue
		}
		total++
		if v <= slo.Seconds() {
			met++
		}
	}
	return met, total
}

// GPUSeconds integrates GPUs over [0, duration) as a step function: each
// sample holds until the next one's At, the last until duration, and the
// first also covers the time before it was taken. This is the bill whether
// or not the pods were ready. A sample without GPUs (a recording made
// before they were kept) counts one GPU per pod.
func GPUSeconds(samples []Sample, duration time.Duration) float64 {
	var total float64
	var from time.Duration
	for i, s := range samples {
		until := duration
		if i+1 < len(samples) {
			until = min(samples[i+1].At, duration)
		}
		gpus := s.GPUs
		if gpus == 0 {
			gpus = s.Pods
		}
		if until > from {
			total += float64(gpus) * (until - from).Seconds()
			from = until
		}
	}
	return total
}

func scaleEvents(samples []Sample) (ups, downs int) {
	for i := 1; i < len(samples); i++ {
		switch d := samples[i].Desired - samples[i-1].Desired; {
		case d > 0:
			ups++
		case d < 0:
			downs++
		}
	}
	return ups, downs
}

// WriteReport creates dir and writes report.md, report.json and the plots
// (one PNG and one SVG per policy, plus comparison.png and .svg) into it.
func WriteReport(dir string, rec Recording) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("creating report directory: %w", err)
	}
	sums := Summarize(rec)
	if err := os.WriteFile(filepath.Join(dir, "report.md"), []byte(markdown(rec, sums)), 0o644); err != nil {
		return fmt.Errorf("writing report.md: %w", err)
	}
	js, err := reportJSON(rec, sums)
	if err != nil {
		return fmt.Errorf("encoding report.json: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "report.json"), js, 0o644); err != nil {
		return fmt.Errorf("writing report.json: %w", err)
	}
	return writePlots(dir, rec)
}

func markdown(rec Recording, sums []Summary) string {
	var b strings.Builder
	b.WriteString("# Autoscaling policies on a replayed trace\n\n")
	fmt.Fprintf(&b, "- Trace: `%s`\n", rec.Trace)
	fmt.Fprintf(&b, "- Slice: start %v, duration %v\n", rec.Start, rec.Duration)
	fmt.Fprintf(&b, "- Speedup: %gx real time\n", rec.Speedup)
	fmt.Fprintf(&b, "- SLO: TTFT p90 <= %v in every trace minute\n", rec.SLO)
	fmt.Fprintf(&b, "- Static replicas (peak need): %d, which meet the SLO in %d minutes offline; no number of replicas meets more\n", rec.StaticReplicas, rec.StaticMinutesMet)
	if rec.Setup != "" {
		fmt.Fprintf(&b, "- Setup: %s\n", rec.Setup)
	}
	b.WriteString("\n")
	b.WriteString("| Policy | Description | TTFT p50 (s) | TTFT p90 (s) | TTFT p99 (s) " +
		"| SLO minutes met | GPU-hours | % of static | Scale-ups | Scale-downs " +
		"| Peak replicas | Peak desired | Unserved | Aborted (streams cut) |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %d/%d (%s) | %s | %s | %d | %d | %d | %d | %d of %d | %d (%d) |\n",
			mdEscape(s.Policy), mdEscape(s.Describe),
			fmtSig(s.TTFTP50), fmtSig(s.TTFTP90), fmtSig(s.TTFTP99),
			s.MinutesMet, s.Minutes, fmtPercent(s.MinutesMetShare),
			fmtSig(s.GPUHours), fmtPercent(s.StaticFraction),
			s.ScaleUps, s.ScaleDowns, s.PeakReplicas, s.PeakDesired,
			s.Unserved, s.Served+s.Unserved, s.Aborted, s.AbortedStreams)
	}
	b.WriteString("\nTTFT quantiles are nearest-rank over every request of the policy; " +
		"an unserved request counts as an infinite TTFT (shown as inf). " +
		"Minutes without arrivals count neither as met nor as missed. " +
		"GPU-hours integrate the GPUs of every existing pod, ready or not, and of deleted replicas until they stop. " +
		"Aborted requests were killed with their replica before their last token; those in parentheses were streaming, " +
		"the others are also unserved.\n")
	return b.String()
}

// fmtSig prints v with 3 significant digits, which is all a replayed
// simulation can claim, without switching to exponents for large values.
func fmtSig(v float64) string {
	switch {
	case math.IsNaN(v):
		return "n/a"
	case math.IsInf(v, 1):
		return "inf"
	case math.Abs(v) >= 1000:
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func fmtPercent(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "n/a"
	}
	return strconv.FormatFloat(100*v, 'f', 0, 64) + "%"
}

// mdEscape keeps a Describe line with a pipe from breaking the table.
func mdEscape(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// JSONFloat is a float64 that JSON can carry whatever its value: finite
// values are numbers, +Inf and -Inf the strings "+Inf" and "-Inf" (a TTFT
// quantile that fell on an unserved request), NaN is null (no data, e.g. a
// policy without requests). encoding/json refuses Inf and NaN otherwise.
type JSONFloat float64

// MarshalJSON implements json.Marshaler.
func (f JSONFloat) MarshalJSON() ([]byte, error) {
	v := float64(f)
	switch {
	case math.IsNaN(v):
		return []byte("null"), nil
	case math.IsInf(v, 1):
		return []byte(`"+Inf"`), nil
	case math.IsInf(v, -1):
		return []byte(`"-Inf"`), nil
	}
	return json.Marshal(v)
}

// UnmarshalJSON implements json.Unmarshaler, inverting MarshalJSON.
func (f *JSONFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "null":
		*f = JSONFloat(math.NaN())
		return nil
	case `"+Inf"`:
		*f = JSONFloat(math.Inf(1))
		return nil
	case `"-Inf"`:
		*f = JSONFloat(math.Inf(-1))
		return nil
	}
	var v float64
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("JSONFloat: %w", err)
	}
	*f = JSONFloat(v)
	return nil
}

// SummaryJSON is Summary as written to report.json: times in seconds,
// floats as JSONFloat.
type SummaryJSON struct {
	Policy          string    `json:"policy"`
	Describe        string    `json:"describe"`
	TTFTP50Seconds  JSONFloat `json:"ttftP50Seconds"`
	TTFTP90Seconds  JSONFloat `json:"ttftP90Seconds"`
	TTFTP99Seconds  JSONFloat `json:"ttftP99Seconds"`
	Served          int       `json:"served"`
	Unserved        int       `json:"unserved"`
	Aborted         int       `json:"aborted"`
	AbortedStreams  int       `json:"abortedStreams"`
	MinutesMet      int       `json:"minutesMet"`
	Minutes         int       `json:"minutes"`
	MinutesMetShare JSONFloat `json:"minutesMetShare"`
	GPUSeconds      JSONFloat `json:"gpuSeconds"`
	GPUHours        JSONFloat `json:"gpuHours"`
	StaticFraction  JSONFloat `json:"staticFraction"`
	ScaleUps        int       `json:"scaleUps"`
	ScaleDowns      int       `json:"scaleDowns"`
	PeakReplicas    int       `json:"peakReplicas"`
	PeakDesired     int       `json:"peakDesired"`
}

// ReportJSON is the document in report.json.
type ReportJSON struct {
	Trace           string        `json:"trace"`
	StartSeconds    JSONFloat     `json:"startSeconds"`
	DurationSeconds JSONFloat     `json:"durationSeconds"`
	Speedup         JSONFloat     `json:"speedup"`
	SLOSeconds      JSONFloat     `json:"sloSeconds"`
	StaticReplicas  int           `json:"staticReplicas"`
	Policies        []SummaryJSON `json:"policies"`
}

func reportJSON(rec Recording, sums []Summary) ([]byte, error) {
	doc := ReportJSON{
		Trace:           rec.Trace,
		StartSeconds:    JSONFloat(rec.Start.Seconds()),
		DurationSeconds: JSONFloat(rec.Duration.Seconds()),
		Speedup:         JSONFloat(rec.Speedup),
		SLOSeconds:      JSONFloat(rec.SLO.Seconds()),
		StaticReplicas:  rec.StaticReplicas,
		Policies:        make([]SummaryJSON, 0, len(sums)),
	}
	for _, s := range sums {
		doc.Policies = append(doc.Policies, SummaryJSON{
			Policy: s.Policy, Describe: s.Describe,
			TTFTP50Seconds: JSONFloat(s.TTFTP50), TTFTP90Seconds: JSONFloat(s.TTFTP90),
			TTFTP99Seconds: JSONFloat(s.TTFTP99),
			Served:         s.Served, Unserved: s.Unserved,
			Aborted: s.Aborted, AbortedStreams: s.AbortedStreams,
			MinutesMet: s.MinutesMet, Minutes: s.Minutes,
			MinutesMetShare: JSONFloat(s.MinutesMetShare),
			GPUSeconds:      JSONFloat(s.GPUSeconds), GPUHours: JSONFloat(s.GPUHours),
			StaticFraction: JSONFloat(s.StaticFraction),
			ScaleUps:       s.ScaleUps, ScaleDowns: s.ScaleDowns,
			PeakReplicas: s.PeakReplicas, PeakDesired: s.PeakDesired,
		})
	}
	return json.MarshalIndent(doc, "", "  ")
}
