package simworld

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
)

// A server's GPU memory: the weights of an 8B model in bf16, plus the KV
// cache pool vLLM reserves on an 80 GB GPU in proportion to its use.
const (
	weightsMiB = 16000
	kvPoolMiB  = 60000
)

// spreadLocked gives every server the share of the SetRate totals a
// Service would send it: each rule's rate split evenly over its ready
// matching pods that serve; everyone else gets nothing. Servers are only
// told of changes, so a rate set on one directly (through its HTTP API)
// holds until the World's share for it changes.
func (w *World) spreadLocked() {
	if w.pods == nil {
		return
	}
	want := map[podKey]float64{}
	idle := map[string]bool{} // by namespace/selector
	for _, rule := range w.rules {
		pods, err := w.pods.Pods(rule.namespace).List(rule.selector)
		if err != nil {
			w.log.Error("list pods", "err", err) // unreachable: listers do not fail
			continue
		}
		var backends []podKey
		for _, p := range pods {
			if k := keyOf(p); w.servers[k] != nil && Ready(p) {
				backends = append(backends, k)
			}
		}
		for _, k := range backends {
			want[k] += rule.rps / float64(len(backends))
		}
		idle[rule.namespace+"/"+rule.selector.String()] = len(backends) == 0
	}
	// With no ready backend, the rule's clients reach the routers in
	// front of its pods instead, which hold what they get.
	for _, r := range w.routers {
		key := r.router.namespace + "/" + r.router.selector.String()
		rps := 0.0
		for _, rule := range w.rules {
			if idle[key] && rule.namespace+"/"+rule.selector.String() == key {
				rps = rule.rps
			}
		}
		r.router.setIdleRate(rps)
	}
	for k, r := range w.servers {
		if r.rate == want[k] {
			continue
		}
		if want[k] == 0 {
			// Say why a server stops getting traffic: a test that sees its
			// load vanish needs to know whether readiness or membership
			// changed.
			w.log.Info("server leaves its load balancer", "pod", k.String(), "reason", w.whyIdleLocked(k))
		}
		if err := r.srv.SetRate(want[k]); err != nil {
			w.log.Warn("cannot set rate", "pod", k.String(), "rate", want[k], "err", err)
			continue
		}
		r.rate = want[k]
	}
}

// gpuUpdate is one PUT to a node exporter's simulation API.
type gpuUpdate struct {
	exporter string // host:port
	uuid     string
	load     sim.Load
}

// updateGPUs makes every GPU's utilization and memory follow the work of
// the server whose pod holds it, through the exporter of the GPU's node.
// GPUs on nodes without a running exporter are skipped.
func (w *World) updateGPUs(ctx context.Context) {
	for _, u := range w.gpuUpdates() {
		err := w.putLoad(ctx, u)
		var rejected *rejectedError
		switch {
		case errors.As(err, &rejected):
			// The exporter answered but refused: the World and the
			// exporter disagree about the node's GPUs.
			w.log.Warn("exporter rejected GPU load", "exporter", u.exporter, "gpu", u.uuid, "err", err)
		case err != nil:
			// Exporters come and go; the next round retries.
			w.log.Debug("cannot set GPU load", "exporter", u.exporter, "gpu", u.uuid, "err", err)
		}
	}
}

// gpuUpdates computes this round's updates: idle GPUs first, so that a GPU
// freed and taken again in the same round ends with its new pod's load.
func (w *World) gpuUpdates() []gpuUpdate {
	w.mu.Lock()
	exporters := map[string]string{}
	for _, r := range w.exporter {
		if r.up.Load() {
			exporters[r.node] = r.addr
		}
	}
	var out []gpuUpdate
	zero := 0.0
	for g, freeMemory := range w.idle {
		if addr, ok := exporters[g.Node]; ok {
			l := sim.Load{Utilization: &zero}
			if freeMemory {
				l.MemoryUsedMiB = &zero
			}
			out = append(out, gpuUpdate{exporter: addr, uuid: sim.GPUUUID(g.Node, g.Index), load: l})
		}
	}
	clear(w.idle)
	type busyServer struct {
		run      *inferenceRun
		exporter string
		gpus     []int
		workers  []groupGPU // of a group's leader (groups.go)
	}
	var busy []busyServer
	for k, r := range w.servers {
		if addr, ok := exporters[r.node]; ok && len(w.gpus[r.node][k][r.container]) > 0 {
			busy = append(busy, busyServer{r, addr, w.gpus[r.node][k][r.container], w.workerGPUsLocked(k, exporters)})
		}
	}
	w.mu.Unlock()

	// Stats advances a simulation, so it is read outside the World's lock.
	for _, b := range busy {
		util, mem := b.run.gpuLoad()
		for _, i := range b.gpus {
			out = append(out, gpuUpdate{exporter: b.exporter, uuid: sim.GPUUUID(b.run.node, i),
				load: sim.Load{Utilization: &util, MemoryUsedMiB: &mem}})
		}
		out = append(out, workerUpdates(b.workers, sim.Load{Utilization: &util, MemoryUsedMiB: &mem})...)
	}
	return out
}

// gpuLoad is the utilization (busy share of the time since the previous
// call, in percent) and framebuffer use the server's work puts on a GPU.
func (r *inferenceRun) gpuLoad() (util, memMiB float64) {
	st := r.srv.Stats()
	if window := st.Now.Sub(r.windowAt); window > 0 {
		util = min(100, max(0, 100*float64(st.BusyTime-r.windowBusy)/float64(window)))
	}
	r.windowAt, r.windowBusy = st.Now, st.BusyTime
	return util, weightsMiB + st.KVCacheUsage*kvPoolMiB
}

func (w *World) putLoad(ctx context.Context, u gpuUpdate) error {
	body, err := json.Marshal(u.load)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("http://%s/api/v1/sim/gpus/%s", u.exporter, u.uuid)
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if resp.StatusCode/100 != 2 {
		return &rejectedError{status: resp.Status, msg: string(bytes.TrimSpace(msg))}
	}
	return nil
}

// rejectedError is an exporter's refusal of a load change.
type rejectedError struct{ status, msg string }

func (e *rejectedError) Error() string { return e.status + ": " + e.msg }

// whyIdleLocked explains why a server gets no share of any rule.
func (w *World) whyIdleLocked(k podKey) string {
	p, err := w.pods.Pods(k.Namespace).Get(k.Name)
	switch {
	case err != nil:
		return "pod not in the informer: " + err.Error()
	case p.UID != k.UID:
		return "pod replaced (new UID)"
	case !Ready(p):
		return fmt.Sprintf("pod not ready (phase %s, conditions %v)", p.Status.Phase, p.Status.Conditions)
	}
	for _, r := range w.rules {
		if r.namespace == k.Namespace && r.selector.Matches(labels.Set(p.Labels)) {
			return fmt.Sprintf("rule %s/%s has rate %v", r.namespace, r.selector, r.rps)
		}
	}
	return "no rule selects it"
}
