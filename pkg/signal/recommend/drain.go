package recommend

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// StreamFamilies are the request-duration histograms (arrival to last
// token, in seconds) of the servers whose stream lengths Streams reads.
var StreamFamilies = []string{
	"vllm:e2e_request_latency_seconds",   // vLLM
	"sglang:e2e_request_latency_seconds", // SGLang
	"tgi_request_duration",               // text-generation-inference
}

// Streams parses one server's exposition (Prometheus text format) and
// returns the sum of its request-duration histograms (StreamFamilies; a
// vLLM with several engines has one series per engine), or nil when it has
// none.
func Streams(exposition []byte) (*histogram.Histogram, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(exposition))
	if err != nil {
		return nil, fmt.Errorf("parsing the exposition: %w", err)
	}
	var hs []*histogram.Histogram
	for _, name := range StreamFamilies {
		f := fams[name]
		if f == nil || f.GetType() != dto.MetricType_HISTOGRAM {
			continue
		}
		for _, m := range f.GetMetric() {
			h, err := histogram.FromDTO(m, 1)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return nil, nil
	}
	return histogram.Merge(hs...)
}

// LongestStream bounds the duration of every stream h counts: the upper
// bound of its highest bucket holding a request. over is true when that is
// the +Inf bucket; longest is then h's largest finite bound, which some
// streams outlasted. n is the number of streams counted.
func LongestStream(h *histogram.Histogram) (longest time.Duration, n float64, over bool) {
	if h == nil || h.Validate() != nil || h.Count <= 0 {
		return 0, 0, false
	}
	top := -1
	for i, c := range h.Counts {
		prev := 0.0
		if i > 0 {
			prev = h.Counts[i-1]
		}
		if c > prev {
			top = i
		}
	}
	if top < 0 {
		return 0, h.Count, false
	}
	bound := h.Bounds[top]
	if math.IsInf(bound, +1) {
		over = true
		if top == 0 {
			return 0, h.Count, true
		}
		bound = h.Bounds[top-1]
	}
	return time.Duration(bound * float64(time.Second)), h.Count, over
}

// Drain is the pod-template advice that lets a replica the HPA removes
// finish its streams: while the preStop hook sleeps, the pod is no longer
// Ready, gets no new requests and serves those it holds; SIGTERM comes
// after, when it holds none (vLLM's default SIGTERM aborts whatever is in
// flight), and SIGKILL at the end of the grace period.
type Drain struct {
	// Longest bounds every measured stream (arrival to last token), from
	// the workload's request-duration histograms; Streams is how many
	// they count, Over that some outlasted the largest finite bucket.
	// Zero Longest: nothing measured, and no advice.
	Longest time.Duration
	Streams float64
	Over    bool
	// PreStop is the preStop sleep; Grace the terminationGracePeriodSeconds.
	PreStop, Grace time.Duration
	// Wait is the drain of a server that finishes its streams after
	// SIGTERM and exits once it holds none.
	Wait WaitDrain
	// Reasons explain PreStop and Grace, keyed "preStop" and
	// "terminationGracePeriodSeconds", and, for a server that passes
	// --shutdown-timeout, Wait's, keyed "wait.preStop" and
	// "wait.terminationGracePeriodSeconds".
	Reasons  map[string]string
	Warnings []string
}

// WaitDrain is the drain of a server that, after SIGTERM, finishes the
// streams it holds and exits as soon as it holds none: vLLM 0.18 and later
// with --shutdown-timeout (vLLM's Kubernetes guide; KServe and llm-d set
// it). The preStop sleep then covers only the endpoint lag, and a removed
// replica gives its GPUs back when its own last stream ends, not after the
// longest stream any replica has served, as the sleep alone holds them.
type WaitDrain struct {
	// PreStop is the preStop sleep, ShutdownTimeout the server's
	// --shutdown-timeout and Grace the terminationGracePeriodSeconds.
	PreStop, ShutdownTimeout, Grace time.Duration
}

// Drain timing beyond the streams themselves. Neither depends on the
// workload: they are how long Kubernetes and a server take to act.
const (
	// EndpointLag is how long requests may still reach a pod after it
	// stops being Ready: kube-proxy, a gateway or an endpoint picker
	// must first see the EndpointSlice change. A request arriving then
	// starts a stream that must end within the sleep too.
	EndpointLag = 5 * time.Second
	// exitAllowance is the time from SIGTERM to the container's exit: a
	// server holding no request shuts down in seconds.
	exitAllowance = 10 * time.Second
)

// forServerTimeout is d for a serving container that already passes
// --shutdown-timeout=t (nothing changes when t is 0 or nothing was
// measured). Its pod-template patch is then the wait drain, and the patch
// cannot change t, which is in the server's args: the grace period covers
// the sleep, the longer of t and the longest stream, and the exit, and a t
// shorter than the longest stream is warned of, with what to raise it to
// (Wait.ShutdownTimeout).
func (d Drain) forServerTimeout(t time.Duration) Drain {
	if d.Longest <= 0 || t <= 0 {
		return d
	}
	streams := max(t, d.Wait.ShutdownTimeout)
	d.Wait.Grace = d.Wait.PreStop + streams + exitAllowance
	d.Reasons = maps.Clone(d.Reasons)
	d.Reasons["wait.preStop"] = fmt.Sprintf("load balancers stop sending to a pod that is no longer Ready within %v; "+
		"SIGTERM then stops new requests, and the server finishes those it holds", d.Wait.PreStop)
	d.Reasons["wait.terminationGracePeriodSeconds"] = fmt.Sprintf("the preStop sleep, %v of streams (the longer of --shutdown-timeout "+
		"and the longest stream), and %v for the server to exit after them", streams, exitAllowance)
	if t < d.Wait.ShutdownTimeout {
		d.Warnings = append(slices.Clone(d.Warnings), fmt.Sprintf("the server's --shutdown-timeout=%d is shorter than the longest measured stream (%v): "+
			"the server of a removed replica aborts the streams it still holds then; raise it to %d",
			int64(t.Seconds()), d.Longest, int64(d.Wait.ShutdownTimeout.Seconds())))
	}
	return d
}

// ErrNoStreams is what RecommendDrain's warning says when nothing was
// measured.
var ErrNoStreams = errors.New("stream lengths not measured: no request-duration histogram (" +
	"vllm:e2e_request_latency_seconds, sglang:e2e_request_latency_seconds, tgi_request_duration) was read from the workload's pods")

// RecommendDrain derives the preStop sleep and grace period from the
// workload's merged request-duration histogram (nil when none was read).
func RecommendDrain(streams *histogram.Histogram, ca Autoscaler) Drain {
	d := Drain{Reasons: map[string]string{}}
	d.Longest, d.Streams, d.Over = LongestStream(streams)
	if d.Longest <= 0 {
		d.Warnings = append(d.Warnings, ErrNoStreams.Error())
		return d
	}
	d.PreStop = roundUp(d.Longest+EndpointLag, time.Second)
	d.Grace = d.PreStop + exitAllowance
	// A stream that starts within the endpoint lag ends within Longest
	// of SIGTERM, which comes at the lag's end.
	d.Wait.PreStop = roundUp(EndpointLag, time.Second)
	d.Wait.ShutdownTimeout = roundUp(d.Longest, time.Second)
	d.Wait.Grace = d.Wait.PreStop + d.Wait.ShutdownTimeout + exitAllowance
	d.Reasons["preStop"] = fmt.Sprintf("every measured stream (%.0f) ended within %v of its arrival; the sleep adds %v for "+
		"load balancers to stop sending to a pod that is no longer Ready, so a stream that starts then ends within it too",
		d.Streams, d.Longest, EndpointLag)
	d.Reasons["terminationGracePeriodSeconds"] = fmt.Sprintf("the preStop sleep and %v for the server to exit after SIGTERM, "+
		"when it holds no request; SIGKILL comes only after it", exitAllowance)
	if d.Over {
		d.Warnings = append(d.Warnings, fmt.Sprintf("some streams outlasted the histogram's largest finite bucket (%v): "+
			"the sleep does not cover them", d.Longest))
	}
	if ca.MaxGracefulTermination > 0 && d.Grace > ca.MaxGracefulTermination {
		d.Warnings = append(d.Warnings, fmt.Sprintf("the grace period %d s is over the cluster autoscaler's --max-graceful-termination-sec %d: "+
			"when it drains a node it kills a replica before its streams end; raise that flag to at least %d",
			int(d.Grace.Seconds()), int(ca.MaxGracefulTermination.Seconds()), int(d.Grace.Seconds())))
	}
	return d
}
