package main

// The CPU and memory figures of the bench: a process's and the machine's,
// read from /proc.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// processCPU is a process's user and system CPU time so far.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// the 14th and 15th fields of the whole line, in clock ticks (100/s).
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(u+s) * 10 * time.Millisecond, nil
}

// cpuRate is the CPU, in cores, a process uses over d.
func cpuRate(ctx context.Context, pid int, d time.Duration) (float64, error) {
	return rateOf(ctx, d, func() (time.Duration, error) { return processCPU(pid) })
}

// rateOf is how fast cpu, a CPU time so far, grows over d, in cores.
func rateOf(ctx context.Context, d time.Duration, cpu func() (time.Duration, error)) (float64, error) {
	c0, err := cpu()
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := sleep(ctx, d); err != nil {
		return 0, err
	}
	c1, err := cpu()
	return float64(c1-c0) / float64(time.Since(t0)), err
}

// machineTicks are the machine's CPU times so far, in clock ticks, from the
// first line of /proc/stat.
type machineTicks struct{ busy, total uint64 }

// since is the busy share of the CPU time between t0 and t.
func (t machineTicks) since(t0 machineTicks) float64 {
	if t.total <= t0.total {
		return 0
	}
	return float64(t.busy-t0.busy) / float64(t.total-t0.total)
}

func machineBusy() (machineTicks, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}, err
	}
	return parseMachineTicks(raw)
}

// parseMachineTicks reads /proc/stat's "cpu" line: user nice system idle
// iowait irq softirq steal ...; idle and iowait are not busy.
func parseMachineTicks(raw []byte) (machineTicks, error) {
	line, _, _ := bytes.Cut(raw, []byte("\n"))
	fields := strings.Fields(string(line))
	if len(fields) < 9 || fields[0] != "cpu" {
		return machineTicks{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var t machineTicks
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return machineTicks{}, fmt.Errorf("/proc/stat: %w", err)
		}
		t.total += v
		if i != 3 && i != 4 {
			t.busy += v
		}
	}
	return t, nil
}

// rssMiB is a process's resident memory, and the part of it that is the
// binary's pages.
func rssMiB(pid int) (total, file float64, err error) {
	if total, err = statusMiB(pid, "VmRSS"); err != nil {
		return 0, 0, err
	}
	file, err = statusMiB(pid, "RssFile")
	return total, file, err
}

// statusMiB reads a size field of /proc/PID/status: VmRSS, or its parts
// RssAnon (what the Go runtime holds) and RssFile (the binary's pages).
func statusMiB(pid int, field string) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no %s", pid, field)
}
