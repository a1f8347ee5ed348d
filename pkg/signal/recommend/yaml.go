package recommend

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
)

// WriteYAML writes the recommendation as a YAML document: a header
// comment with what was measured, warnings, and the behavior block with
// a comment line above every number saying why. The block pastes into an
// HPA's spec.
func (r *Recommendation) WriteYAML(w io.Writer) error {
	bw := bufio.NewWriter(w)
	wl := r.Workload
	fmt.Fprintf(bw, "# HPA %s -> %s\n", wl.HPA, wl.Target)
	fmt.Fprintf(bw, "# measured: start-up p95 %s over %d pods; %s GPU(s) per replica, %s GPUs per node\n",
		orUnknown(r.StartupP95 > 0, r.StartupP95.String()), len(wl.Startup),
		orUnknown(wl.GPUsPerPod > 0, fmt.Sprint(wl.GPUsPerPod)), orUnknown(wl.GPUsPerNode > 0, fmt.Sprint(wl.GPUsPerNode)))
	for _, warn := range r.Warnings {
		fmt.Fprintf(bw, "# WARNING: %s\n", warn)
	}
	fmt.Fprintln(bw, "behavior:")
	r.writeRules(bw, "scaleUp", r.Behavior.ScaleUp)
	r.writeRules(bw, "scaleDown", r.Behavior.ScaleDown)
	fmt.Fprintln(bw, "---")
	r.writeDrain(bw)
	return bw.Flush()
}

// writeDrain writes the pod-template advice as a second document, which
// merges into the target's spec.template (kubectl patch --type=strategic
// with this file, say). The patch sets the preStop sleep and the grace
// period, never the server's args, which a strategic merge would replace:
// so it carries the drain of a server that exits once idle only when the
// serving container already passes --shutdown-timeout, and the sleep over
// the longest stream otherwise, with the other form in a comment. With
// nothing measured it writes only why.
func (r *Recommendation) writeDrain(w io.Writer) {
	d, wl := r.Drain, r.Workload
	fmt.Fprintf(w, "# %s pod template: a replica the HPA removes finishes its streams before it exits\n", wl.Target)
	for _, warn := range d.Warnings {
		fmt.Fprintf(w, "# WARNING: %s\n", warn)
	}
	if d.Longest <= 0 {
		return
	}
	if wl.ShutdownTimeout > 0 {
		r.writeWaitDrain(w)
		return
	}
	fmt.Fprintf(w, "# measured: %.0f streams, the longest within %v\n", d.Streams, d.Longest)
	fmt.Fprintln(w, "spec:")
	fmt.Fprintf(w, "  # %s\n", d.Reasons["terminationGracePeriodSeconds"])
	fmt.Fprintf(w, "  terminationGracePeriodSeconds: %d\n", int64(d.Grace.Seconds()))
	writePreStop(w, wl.Container, d.Reasons["preStop"], d.PreStop)
	fmt.Fprintln(w, "# vLLM 0.18 or later drains after SIGTERM with --shutdown-timeout and exits once idle, so a removed")
	fmt.Fprintln(w, "# replica gives its GPUs back when its own streams end: instead of the sleep above, set")
	fmt.Fprintf(w, "#   terminationGracePeriodSeconds: %d, preStop sleep seconds: %d (the endpoint lag),\n",
		int64(d.Wait.Grace.Seconds()), int64(d.Wait.PreStop.Seconds()))
	fmt.Fprintf(w, "#   and add --shutdown-timeout=%d to the server's args\n", int64(d.Wait.ShutdownTimeout.Seconds()))
	fmt.Fprintln(w, "---")
}

// writeWaitDrain writes the drain of a serving container that passes
// --shutdown-timeout (Drain.forServerTimeout): the sleep covers the
// endpoint lag only, and the grace period the sleep, the streams and the
// exit.
func (r *Recommendation) writeWaitDrain(w io.Writer) {
	d, wl := r.Drain, r.Workload
	fmt.Fprintf(w, "# measured: %.0f streams, the longest within %v; the server exits once idle (--shutdown-timeout=%d)\n",
		d.Streams, d.Longest, int64(wl.ShutdownTimeout.Seconds()))
	fmt.Fprintln(w, "spec:")
	fmt.Fprintf(w, "  # %s\n", d.Reasons["wait.terminationGracePeriodSeconds"])
	fmt.Fprintf(w, "  terminationGracePeriodSeconds: %d\n", int64(d.Wait.Grace.Seconds()))
	writePreStop(w, wl.Container, d.Reasons["wait.preStop"], d.Wait.PreStop)
	fmt.Fprintf(w, "# without --shutdown-timeout the server aborts its streams at SIGTERM, and the sleep must cover them:\n")
	fmt.Fprintf(w, "#   terminationGracePeriodSeconds: %d, preStop sleep seconds: %d\n", int64(d.Grace.Seconds()), int64(d.PreStop.Seconds()))
	fmt.Fprintln(w, "---")
}

// writePreStop writes the serving container's preStop sleep, with why.
func writePreStop(w io.Writer, container, why string, sleep time.Duration) {
	fmt.Fprintln(w, "  containers:")
	fmt.Fprintf(w, "  - name: %s\n", orUnknown(container != "", container))
	fmt.Fprintln(w, "    lifecycle:")
	fmt.Fprintln(w, "      preStop:")
	fmt.Fprintln(w, "        sleep:")
	fmt.Fprintf(w, "          # %s\n", why)
	fmt.Fprintf(w, "          seconds: %d\n", int64(sleep.Seconds()))
}

func (r *Recommendation) writeRules(w io.Writer, name string, rules *autoscalingv2.HPAScalingRules) {
	if rules == nil {
		return
	}
	r.comment(w, "  ", name)
	fmt.Fprintf(w, "  %s:\n", name)
	if v := rules.StabilizationWindowSeconds; v != nil {
		r.comment(w, "    ", name+".stabilizationWindowSeconds")
		fmt.Fprintf(w, "    stabilizationWindowSeconds: %d\n", *v)
	}
	if v := rules.SelectPolicy; v != nil {
		r.comment(w, "    ", name+".selectPolicy")
		fmt.Fprintf(w, "    selectPolicy: %s\n", *v)
	}
	if len(rules.Policies) == 0 {
		return
	}
	fmt.Fprintln(w, "    policies:")
	for i, p := range rules.Policies {
		path := fmt.Sprintf("%s.policies[%d]", name, i)
		fmt.Fprintf(w, "    - type: %s\n", p.Type)
		r.comment(w, "      ", path+".value")
		fmt.Fprintf(w, "      value: %d\n", p.Value)
		r.comment(w, "      ", path+".periodSeconds")
		fmt.Fprintf(w, "      periodSeconds: %d\n", p.PeriodSeconds)
	}
}

func (r *Recommendation) comment(w io.Writer, indent, path string) {
	if why, ok := r.Reasons[path]; ok {
		fmt.Fprintf(w, "%s# %s\n", indent, strings.ReplaceAll(why, "\n", " "))
	}
}

func orUnknown(known bool, s string) string {
	if !known {
		return "unknown"
	}
	return s
}
