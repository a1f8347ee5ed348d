package main

// What one run measured, and the tables it is printed as.

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// result is what one namespace size measured.
type result struct {
	Pods, Requests int
	Metric         string
	// Accept is the lists' encoding, as the client asked for it.
	Accept string
	// Gap is the time between two timed lists (0: back to back).
	Gap       time.Duration
	Latencies []time.Duration // sorted
	// FloorLatencies time the same requests with a selector matching no
	// pod, after the lists: the path's own latency on this machine, under
	// the same scraping, with nothing to read or encode. Sorted.
	FloorLatencies    []time.Duration
	AnswerBytes       int
	AdapterCPUPerList time.Duration
	// APIServerCPUPerList is the kube-apiserver's CPU a list beyond its
	// rate in the 10 s before (APIServerIdleCPU, cores): the aggregator's
	// relay of the answer, its filters and its collector.
	APIServerCPUPerList time.Duration
	APIServerIdleCPU    float64
	// PodServersCPU is the pod servers' CPU, in cores, in the same 10 s.
	PodServersCPU float64
	// DuringScrapes and BetweenScrapes are the timed lists' latencies,
	// sorted, split by whether the pod servers used any CPU while the list
	// ran (their /proc/PID/stat times, in 10 ms ticks): whether it met the
	// scrape cycle's burst.
	DuringScrapes, BetweenScrapes []time.Duration
	// MachineBusy is the share of the machine's CPU time that was busy
	// while the timed lists ran (/proc/stat): near 1, a list waits for a
	// core.
	MachineBusy float64
	// AdapterIdleCPU is the adapter's CPU, in cores, while it only scrapes.
	AdapterIdleCPU float64
	// ScrapesPerSec is how many scrapes the adapter finished a second in
	// the same 10 s, and CPUPerScrape its CPU over them: a starved adapter
	// scrapes less often than asked, and its cores then understate what
	// the interval costs.
	ScrapesPerSec float64
	CPUPerScrape  time.Duration
	AdapterRSSMiB float64
	// AdapterRSSFileMiB is the part of RSS that is the binary's pages.
	AdapterRSSFileMiB float64
	// AdapterRSSProfiledMiB and its file-backed part are the same after the
	// bench's CPU and heap profiles of the adapter.
	AdapterRSSProfiledMiB, AdapterRSSProfiledFileMiB float64
	// ProfiledLists is how many lists the CPU profile covers: a
	// function's seconds in it over this are its CPU per list.
	ProfiledLists int
	// AdapterHeapMiB is the Go heap in use, from the adapter's /metrics.
	AdapterHeapMiB float64
	// ClientSlow and AdapterSlow count the timed lists over each of
	// slowBounds: the client's from Latencies, the adapter's from its own
	// apiserver_request_duration_seconds, the time in its handler chain
	// without the aggregator's relay or the client's read. A tail the
	// client sees and the adapter does not is outside the adapter.
	ClientSlow, AdapterSlow [len(slowBounds)]int
	PodsReady, FirstFull    time.Duration
}

// slowBounds are bounds of the API server's request-duration buckets
// (k8s.io/apiserver's apiserver_request_duration_seconds): lists over them
// are counted on both sides.
var slowBounds = [...]float64{0.025, 0.05, 0.1}

// countOver is how many of latencies exceed each of slowBounds.
func countOver(latencies []time.Duration) (n [len(slowBounds)]int) {
	for _, l := range latencies {
		for i, b := range slowBounds {
			if l.Seconds() > b {
				n[i]++
			}
		}
	}
	return n
}

// histogramOver is how many of h's observations exceed each of
// slowBounds, each of which must be one of h's bounds.
func histogramOver(h *histogram.Histogram) (n [len(slowBounds)]int, err error) {
	for i, b := range slowBounds {
		j := slices.Index(h.Bounds, b)
		if j < 0 {
			return n, fmt.Errorf("no bucket bound %v in %v", b, h.Bounds)
		}
		n[i] = int(math.Round(h.Count - h.Counts[j]))
	}
	return n, nil
}

func (r result) quantile(q float64) time.Duration {
	return quantileOf(r.Latencies, q)
}

// quantileOf is the q-quantile of sorted latencies, 0 of none.
func quantileOf(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func (r result) line() string {
	return fmt.Sprintf("%d pods %s (%s, %s lists): median %v p90 %v p99 %v max %v; %d bytes; adapter CPU %v per list, kube-apiserver's %v (%.2f cores scraping: %.0f scrapes/s, %v CPU each), RSS %.0f MiB (%.0f MiB file; %.0f and %.0f after profiling), heap %.0f MiB; %d lists in the CPU profile; floor (no pod selected) median %v p99 %v; lists over %s, client/adapter: %s; machine busy %.0f%% during the lists, pod servers %.2f cores; %s; pods Ready after %v, full list after %v",
		r.Pods, r.Metric, encodingName(r.Accept), requestsText(r), r.quantile(0.5).Round(time.Microsecond*100), r.quantile(0.9).Round(time.Microsecond*100),
		r.quantile(0.99).Round(time.Microsecond*100), r.Latencies[len(r.Latencies)-1].Round(time.Microsecond*100),
		r.AnswerBytes, r.AdapterCPUPerList.Round(time.Microsecond*100), r.APIServerCPUPerList.Round(time.Microsecond*100), r.AdapterIdleCPU, r.ScrapesPerSec, r.CPUPerScrape.Round(time.Microsecond), r.AdapterRSSMiB, r.AdapterRSSFileMiB, r.AdapterRSSProfiledMiB, r.AdapterRSSProfiledFileMiB, r.AdapterHeapMiB, r.ProfiledLists,
		quantileOf(r.FloorLatencies, 0.5).Round(time.Microsecond*100), quantileOf(r.FloorLatencies, 0.99).Round(time.Microsecond*100), boundsText(), slowText(r), 100*r.MachineBusy, r.PodServersCPU, burstText(r), r.PodsReady.Round(time.Second), r.FirstFull.Round(time.Second))
}

// burstText is the lists that met a scrape burst against those that did
// not: how many, their median and p90.
func burstText(r result) string {
	group := func(l []time.Duration) string {
		return fmt.Sprintf("%d, %v / %v", len(l), quantileOf(l, 0.5).Round(100*time.Microsecond), quantileOf(l, 0.9).Round(100*time.Microsecond))
	}
	return "during scrapes " + group(r.DuringScrapes) + ", between " + group(r.BetweenScrapes)
}

// encodingName is an Accept header's short name in the report.
func encodingName(accept string) string {
	if accept == acceptProtobuf {
		return "protobuf"
	}
	return "JSON"
}

// markdown is the report: one row per size.
func markdown(rs []result, interval time.Duration) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# List latency through the aggregation layer\n\n`GET .../namespaces/NS/pods/*/METRIC?labelSelector=app=%s`, sequential, one kept-alive HTTP/2 connection to a real kube-apiserver; the adapter scrapes every pod itself every %v.\n\n", appLabel, interval)
	fmt.Fprintf(&sb, "| pods | metric | encoding | requests | median | p90 | p99 | max | answer | adapter CPU per list | kube-apiserver CPU per list | adapter CPU scraping | scrapes/s, CPU each | adapter RSS (file-backed) | RSS after profiling (file-backed) | adapter heap in use | floor: no pod selected, median / p99 | lists over %s: client / adapter | machine busy during the lists | pod servers' CPU | lists during scrapes / between: how many, median / p90 | pods Ready after | full list after |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", boundsText())
	for _, r := range rs {
		fmt.Fprintf(&sb, "| %d | %s | %s | %s | %v | %v | %v | %v | %.2f MB | %v | %v | %.2f cores | %.0f, %v | %.0f MiB (%.0f) | %.0f MiB (%.0f) | %.0f MiB | %v / %v | %s | %.0f%% | %.2f cores | %s | %v | %v |\n", r.Pods, r.Metric, encodingName(r.Accept), requestsText(r),
			r.quantile(0.5).Round(100*time.Microsecond), r.quantile(0.9).Round(100*time.Microsecond), r.quantile(0.99).Round(100*time.Microsecond),
			r.Latencies[len(r.Latencies)-1].Round(100*time.Microsecond), float64(r.AnswerBytes)/1e6, r.AdapterCPUPerList.Round(100*time.Microsecond), r.APIServerCPUPerList.Round(100*time.Microsecond), r.AdapterIdleCPU,
			r.ScrapesPerSec, r.CPUPerScrape.Round(time.Microsecond), r.AdapterRSSMiB, r.AdapterRSSFileMiB, r.AdapterRSSProfiledMiB, r.AdapterRSSProfiledFileMiB, r.AdapterHeapMiB,
			quantileOf(r.FloorLatencies, 0.5).Round(100*time.Microsecond), quantileOf(r.FloorLatencies, 0.99).Round(100*time.Microsecond), slowText(r), 100*r.MachineBusy, r.PodServersCPU, burstText(r), r.PodsReady.Round(time.Second), r.FirstFull.Round(time.Second))
	}
	return sb.String()
}

// requestsText is how many lists were timed, and how far apart if not
// back to back.
func requestsText(r result) string {
	if r.Gap <= 0 {
		return strconv.Itoa(r.Requests)
	}
	return fmt.Sprintf("%d, %v apart", r.Requests, r.Gap)
}

// boundsText is slowBounds for a column's title: "25 / 50 / 100 ms".
func boundsText() string {
	parts := make([]string, len(slowBounds))
	for i, b := range slowBounds {
		parts[i] = strconv.FormatFloat(b*1000, 'f', -1, 64)
	}
	return strings.Join(parts, " / ") + " ms"
}

// slowText is r's counts over slowBounds, the client's then the adapter's
// at each bound: "40/31, 12/3, 2/0".
func slowText(r result) string {
	parts := make([]string, len(slowBounds))
	for i := range slowBounds {
		parts[i] = fmt.Sprintf("%d/%d", r.ClientSlow[i], r.AdapterSlow[i])
	}
	return strings.Join(parts, ", ")
}
