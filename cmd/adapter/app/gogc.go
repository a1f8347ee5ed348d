package app

import (
	"log/slog"
	"runtime/debug"
)

// defaultGCPercent is --gc-percent's default, measured at 10,000 pods
// (docs/performance.md, "The collector's target").
const defaultGCPercent = 25

// setGCPercent sets the garbage collector's target percentage (GOGC) to
// percent, unless the environment sets GOGC, which wins: the runtime has
// applied it already (an empty one is unset, to the runtime too). Most of the adapter's heap lives long (the pod
// cache, the latency windows, each pod's newest samples); what a scrape
// cycle allocates is garbage within a cycle. At Go's default of 100 the
// heap grows to twice the long-lived part before a collection, so that
// half of the resident memory holds garbage; a lower percentage collects
// sooner for a little more CPU (docs/performance.md, "The collector's
// target"). Prometheus made the same trade in 2.53 (GOGC 75).
func setGCPercent(percent int, lookupEnv func(string) (string, bool), log *slog.Logger) {
	if v, ok := lookupEnv("GOGC"); ok && v != "" {
		log.Info("garbage collector target from the environment", "GOGC", v)
		return
	}
	debug.SetGCPercent(percent)
	log.Info("garbage collector target set", "percent", percent)
}
