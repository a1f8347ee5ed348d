package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
)

// promqlSide is one of the two adapters and the version it serves.
type promqlSide struct {
	Adapter, Version string
}

// promqlSides in the order each round asks them.
var promqlSides = [2]promqlSide{{Adapter: "gpuscale", Version: "v1beta2"}, {Adapter: "prometheus-adapter", Version: "v1beta1"}}

// idleWindow is how long processes' idle CPU is measured before each
// metric's lists: whole scrape intervals of Prometheus, and 20 s at least.
func idleWindow(interval time.Duration) time.Duration {
	return max(20*time.Second, 4*interval)
}

// pids are the measured processes' ids: each adapter by its name, and
// the shared ones by theirs.
func (pb *promqlBench) pids() map[string]int {
	return map[string]int{
		promqlSides[0].Adapter: pb.env.AdapterPID(), promqlSides[1].Adapter: pb.pa.Pid(),
		procPrometheus: pb.prom.PID(), procAPIServer: pb.env.Cluster.PID("kube-apiserver"), procEtcd: pb.env.Cluster.PID("etcd"),
	}
}

// readCPU is the CPU time so far of the processes named.
func readCPU(pids map[string]int, names ...string) (cpuTimes, error) {
	out := make(cpuTimes, len(names))
	for _, n := range names {
		if pids[n] == 0 {
			return nil, fmt.Errorf("no process %s to measure", n)
		}
		d, err := processCPU(pids[n])
		if err != nil {
			return nil, fmt.Errorf("%s: %w", n, err)
		}
		out[n] = d
	}
	return out, nil
}

// idle is each process's CPU, in cores, over d with no list asked.
func (pb *promqlBench) idle(ctx context.Context, d time.Duration) (map[string]float64, error) {
	pids := pb.pids()
	names := make([]string, 0, len(pids))
	for n := range pids {
		names = append(names, n)
	}
	c0, err := readCPU(pids, names...)
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c1, err := readCPU(pids, names...)
	if err != nil {
		return nil, err
	}
	wall := time.Since(t0)
	out := make(map[string]float64, len(names))
	for _, n := range names {
		out[n] = float64(c1[n]-c0[n]) / float64(wall)
	}
	return out, nil
}

// alternate times pb.o.Requests lists of metric of each adapter, in
// turns (gpuscale, prometheus-adapter, gpuscale, ...) after 5 untimed
// turns, checking that every answer names all n pods. Each adapter's CPU
// is its process's over the whole run (it does nothing for the other's
// lists, and its work after answering, its garbage collection say, is
// still its list's); Prometheus's, kube-apiserver's and etcd's is theirs
// during each side's own requests. Both less their idle rates.
func (pb *promqlBench) alternate(ctx context.Context, ns, metric string, n int, accept string) (pairResult, error) {
	r := pairResult{Pods: n, Requests: pb.o.Requests, Metric: metric, Accept: accept}
	sel := "app=" + appLabel
	for range 5 {
		for _, s := range promqlSides {
			if err := pb.checked(ctx, s, accept, ns, metric, sel, n, nil); err != nil {
				return r, err
			}
		}
	}
	pb.log.Info("measuring idle CPU", "metric", metric, "for", idleWindow(pb.o.Interval))
	idle, err := pb.idle(ctx, idleWindow(pb.o.Interval))
	if err != nil {
		return r, err
	}
	r.Idle = idle
	pids := pb.pids()
	adapters := []string{promqlSides[0].Adapter, promqlSides[1].Adapter}
	pb.log.Info("timing lists in turns", "metric", metric, "pods", n, "requests", pb.o.Requests, "encoding", encodingName(accept))
	own0, err := readCPU(pids, adapters...)
	if err != nil {
		return r, err
	}
	start := time.Now()
	shared := [2]*cpuMeter{newCPUMeter(idle), newCPUMeter(idle)}
	sides := [2]*sideResult{&r.GPUScale, &r.PA}
	for k, s := range promqlSides {
		sides[k].Adapter, sides[k].Version = s.Adapter, s.Version
	}
	for range pb.o.Requests {
		for k, s := range promqlSides {
			if err := pb.checked(ctx, s, accept, ns, metric, sel, n, &timedList{pids: pids, meter: shared[k], side: sides[k]}); err != nil {
				return r, err
			}
		}
	}
	own1, err := readCPU(pids, adapters...)
	if err != nil {
		return r, err
	}
	total := time.Since(start)
	for k, s := range promqlSides {
		own := newCPUMeter(map[string]float64{procAdapter: idle[s.Adapter]})
		own.add(cpuTimes{procAdapter: own0[s.Adapter]}, cpuTimes{procAdapter: own1[s.Adapter]}, total)
		sides[k].CPU = shared[k].per(pb.o.Requests)
		sides[k].CPU[procAdapter] = own.per(pb.o.Requests)[procAdapter]
		slices.Sort(sides[k].Latencies)
	}
	if err := r.readRSS(pids); err != nil {
		return r, err
	}
	return r, pb.profile(ctx, ns, metric, n, accept)
}

// readRSS records the adapters' and Prometheus's resident memory.
func (r *pairResult) readRSS(pids map[string]int) error {
	var errs [3]error
	r.GPUScale.AdapterRSSMiB, errs[0] = statusMiB(pids[promqlSides[0].Adapter], "VmRSS")
	r.PA.AdapterRSSMiB, errs[1] = statusMiB(pids[promqlSides[1].Adapter], "VmRSS")
	r.PrometheusRSSMiB, errs[2] = statusMiB(pids[procPrometheus], "VmRSS")
	return errors.Join(errs[:]...)
}

// timedList is where a timed list records itself.
type timedList struct {
	pids  map[string]int
	meter *cpuMeter
	side  *sideResult
}

// checked lists once, timed into t if not nil, and checks that the
// answer names all n pods.
func (pb *promqlBench) checked(ctx context.Context, s promqlSide, accept, ns, metric, sel string, n int, t *timedList) error {
	var before cpuTimes
	var err error
	if t != nil {
		if before, err = readCPU(t.pids, sharedProcs...); err != nil {
			return err
		}
	}
	began := time.Now()
	body, err := pb.listAt(ctx, s.Version, accept, ns, metric, sel)
	wall := time.Since(began)
	if t != nil {
		after, cpuErr := readCPU(t.pids, sharedProcs...)
		if cpuErr != nil {
			return cpuErr
		}
		t.meter.add(before, after, wall)
		t.side.Latencies = append(t.side.Latencies, wall)
		t.side.AnswerBytes = len(body)
	}
	if err != nil {
		return fmt.Errorf("%s list: %w", s.Adapter, err)
	}
	got, err := answerPods(s.Version, body)
	if err != nil {
		return fmt.Errorf("%s's answer: %w", s.Adapter, err)
	}
	if got != n {
		return fmt.Errorf("%s's answer names %d of the %d pods", s.Adapter, got, n)
	}
	if t != nil {
		t.side.Items = got
	}
	return nil
}

// profile saves a CPU profile of gpuscale's adapter over 10 s of its
// lists, after the timed ones: where its part of a list goes.
func (pb *promqlBench) profile(ctx context.Context, ns, metric string, n int, accept string) error {
	const d = 10 * time.Second
	done := make(chan error, 1)
	go func() {
		done <- pb.saveProfile(ctx, fmt.Sprintf("cpu-gpuscale-lists-%d-%s.pb.gz", n, metric), d)
	}()
	for end := time.Now().Add(d); time.Now().Before(end); {
		if _, err := pb.listAt(ctx, promqlSides[0].Version, accept, ns, metric, "app="+appLabel); err != nil {
			<-done
			return err
		}
	}
	return <-done
}
