package simworld

import (
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// defaultGracePeriod is the API server's terminationGracePeriodSeconds
// when a pod sets none.
const defaultGracePeriod = 30 * time.Second

// termination is how a pod's inference container ends once the pod is
// deleted, read from its spec as the kubelet and vLLM would act on it:
//
//   - the kubelet first runs the container's preStop hook; a sleep hook
//     keeps the server running, serving what it holds (the pod is no
//     longer Ready, so it gets no new requests);
//   - then it sends SIGTERM: vLLM aborts every request in flight at once,
//     unless started with --shutdown-timeout, when it finishes them for
//     up to that long and exits once it holds none;
//   - at the end of the grace period it sends SIGKILL: whatever is left is
//     aborted.
//
// Durations are the pod's, in wall time.
type termination struct {
	grace           time.Duration // terminationGracePeriodSeconds, or the deletion's own
	preStop         time.Duration // the preStop hook's sleep
	shutdownTimeout time.Duration // vLLM's --shutdown-timeout: how long SIGTERM drains
}

// terminationOf reads how container c of p ends.
func terminationOf(p *corev1.Pod, c *corev1.Container) termination {
	t := termination{grace: defaultGracePeriod}
	if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g >= 0 {
		t.grace = time.Duration(*g) * time.Second
	}
	t.withDeletion(p)
	if c == nil {
		return t
	}
	if l := c.Lifecycle; l != nil && l.PreStop != nil {
		t.preStop = sleepOf(l.PreStop)
	}
	t.shutdownTimeout = shutdownTimeoutOf(c.Args)
	return t
}

// withDeletion takes the grace period a deletion asked for, which
// overrides the spec's (kubectl delete --grace-period, an eviction's).
func (t *termination) withDeletion(p *corev1.Pod) {
	if p != nil && p.DeletionGracePeriodSeconds != nil && *p.DeletionGracePeriodSeconds >= 0 {
		t.grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
}

// sleepOf is how long a preStop hook keeps the container up: the sleep
// action's seconds, or an exec of sleep N. Other hooks take no time here.
func sleepOf(h *corev1.LifecycleHandler) time.Duration {
	if h.Sleep != nil {
		return time.Duration(max(h.Sleep.Seconds, 0)) * time.Second
	}
	if h.Exec != nil && len(h.Exec.Command) == 2 && (h.Exec.Command[0] == "sleep" || strings.HasSuffix(h.Exec.Command[0], "/sleep")) {
		if n, err := strconv.ParseFloat(h.Exec.Command[1], 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return 0
}

// shutdownTimeoutOf reads vLLM's --shutdown-timeout from a container's
// arguments (--shutdown-timeout=N or --shutdown-timeout N, in seconds).
func shutdownTimeoutOf(args []string) time.Duration {
	const flag = "--shutdown-timeout"
	for i, a := range args {
		v, ok := strings.CutPrefix(a, flag+"=")
		if !ok && a == flag && i+1 < len(args) {
			v, ok = args[i+1], true
		}
		if !ok {
			continue
		}
		if n, err := strconv.ParseFloat(v, 64); err == nil && n > 0 {
			return time.Duration(n * float64(time.Second))
		}
	}
	return 0
}

// terminate plays t on the server of a deleted pod: it stops serving HTTP
// at once (the pod and its IP are gone, and a new pod may get the IP), goes
// on with the requests it holds through the preStop sleep and, with a
// shutdown timeout, after SIGTERM, then aborts what is left and stops.
// Durations run scale times faster on now's clock (the World's
// TimeScale). Closing stop ends it at once, counting nothing.
func (r *inferenceRun) terminate(now func() time.Time, t termination, scale float64, poll time.Duration, stop <-chan struct{}) (inferencesim.Aborted, bool) {
	_ = r.http.Close()
	onClock := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	start := now()
	kill := start.Add(onClock(t.grace))
	sigterm := start.Add(onClock(min(t.preStop, t.grace)))
	exit := sigterm
	if t.shutdownTimeout > 0 {
		exit = start.Add(onClock(min(t.preStop+t.shutdownTimeout, t.grace)))
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		at := now()
		// The preStop sleep runs to its end; after SIGTERM a draining
		// vLLM exits as soon as it holds nothing.
		if !at.Before(exit) || !at.Before(kill) || (!at.Before(sigterm) && r.srv.InFlight() == 0) {
			break
		}
		select {
		case <-tick.C:
		case <-stop:
			r.stop()
			return inferencesim.Aborted{}, false
		}
	}
	aborted := r.srv.Abort()
	r.stop()
	return aborted, true
}

// terminateLocked plays the termination of a deleted pod's server in the
// background, counting what it aborts. p is the pod as last seen, nil once
// gone; a grace period its deletion set overrides the spec's.
func (w *World) terminateLocked(k podKey, r *inferenceRun, p *corev1.Pod) {
	t := w.terminationLocked(k, r, p)
	w.terminating[k] = r
	w.draining.Add(1)
	go func() {
		defer w.draining.Done()
		aborted, done := r.terminate(w.opts.Now, t, w.opts.TimeScale, w.opts.GPUUpdateInterval/10, w.stopDrains)
		w.mu.Lock()
		delete(w.terminating, k)
		if done {
			sum := w.aborted[k.Namespace]
			sum.Requests += aborted.Requests
			sum.Streams += aborted.Streams
			w.aborted[k.Namespace] = sum
		}
		w.mu.Unlock()
		if done {
			w.log.Info("deleted pod's inference server stopped", "pod", k.String(), "grace", t.grace, "preStop", t.preStop,
				"shutdownTimeout", t.shutdownTimeout, "abortedRequests", aborted.Requests, "abortedStreams", aborted.Streams)
		}
	}()
}

// Aborted returns how many requests the servers of namespace's deleted
// pods dropped unfinished, since the World started.
func (w *World) Aborted(namespace string) inferencesim.Aborted {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.aborted[namespace]
}

// Terminating returns how many deleted pods of namespace still run their
// inference server (in their preStop sleep or draining after SIGTERM), and
// the GPUs they hold: kwok removes a deleted pod at once, while a kubelet
// keeps it, and its GPUs, until its containers exit.
func (w *World) Terminating(namespace string) (pods, gpus int) {
	return w.TerminatingNamed(namespace, "")
}

// TerminatingNamed is Terminating for the pods whose names begin with
// prefix: a Deployment's pods are named after it.
func (w *World) TerminatingNamed(namespace, prefix string) (pods, gpus int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, r := range w.terminating {
		if k.Namespace == namespace && strings.HasPrefix(k.Name, prefix) {
			pods++
			gpus += r.gpus
		}
	}
	return pods, gpus
}

// terminationLocked is how r's pod, last seen as p (nil once gone), ends:
// its spec's, with the grace period its deletion first gave it
// (noteDeletion), else the one p carries.
func (w *World) terminationLocked(k podKey, r *inferenceRun, p *corev1.Pod) termination {
	t := r.term
	t.withDeletion(p)
	if g, ok := w.deletionGrace[k]; ok {
		t.grace = g
		delete(w.deletionGrace, k)
	}
	return t
}

// noteDeletion keeps the grace period a pod's deletion first gives it,
// from the watch event that marks it deleted. kwok, as a kubelet does once
// the containers have exited, then deletes the pod again with a grace of
// 0, at once, and a World that synced only after that would read 0 and
// abort a drain that had its grace period. A later shortening by a user
// (a second delete with a smaller grace) looks the same and is not
// followed; a deletion that starts at 0 (kubectl delete --force) is.
func (w *World) noteDeletion(oldObj, newObj any) {
	old, _ := oldObj.(*corev1.Pod)
	pod, _ := newObj.(*corev1.Pod)
	if old == nil || pod == nil || old.DeletionTimestamp != nil || pod.DeletionTimestamp == nil || pod.DeletionGracePeriodSeconds == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.deletionGrace[keyOf(pod)]; !seen {
		w.deletionGrace[keyOf(pod)] = time.Duration(max(*pod.DeletionGracePeriodSeconds, 0)) * time.Second
	}
}
