package localcluster

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// groupAlive reports whether any process of the group is still running.
// Zombies do not count: killed grandchildren are reparented to PID 1, which
// in a container may never reap them.
func groupAlive(t *testing.T, pgid int) bool {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue // exited meanwhile
		}
		// Fields after the parenthesized command: state ppid pgrp ...
		_, rest, ok := strings.Cut(string(data), ") ")
		fields := strings.Fields(rest)
		if !ok || len(fields) < 3 {
			continue
		}
		if fields[2] == strconv.Itoa(pgid) && fields[0] != "Z" {
			return true
		}
	}
	return false
}

func TestProcessStopKillsGroup(t *testing.T) {
	tests := []struct {
		name   string
		script string
		grace  time.Duration
	}{
		// The shell forks a grandchild; both must go.
		{"terminates on SIGTERM", "sleep 300 & sleep 300", time.Minute},
		// A component that ignores SIGTERM is killed after the grace period.
		{"ignores SIGTERM", `trap "" TERM; sleep 300 & sleep 300 & wait`, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := startProcess("sh", "/bin/sh", []string{"-c", tt.script}, nil, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.grace = tt.grace
			pgid := p.cmd.Process.Pid
			time.Sleep(100 * time.Millisecond) // let the shell fork
			if !groupAlive(t, pgid) {
				t.Fatal("process group not running")
			}
			if err := p.stop(); err != nil {
				t.Fatal(err)
			}
			if !p.exited() {
				t.Error("stop returned before the process exited")
			}
			if groupAlive(t, pgid) {
				t.Error("processes of the group survived stop")
			}
			if err := p.stop(); err != nil {
				t.Errorf("second stop: %v", err)
			}
		})
	}
}

func TestProcessFailureQuotesLog(t *testing.T) {
	var side bytes.Buffer
	script := `for i in $(seq 1 40); do echo "line $i"; done; echo "listen tcp 127.0.0.1:1: bind: address already in use" >&2; exit 3`
	p, err := startProcess("comp", "/bin/sh", []string{"-c", script}, nil, t.TempDir(), &side)
	if err != nil {
		t.Fatal(err)
	}
	err = p.waitFor(context.Background(), "ready", 10*time.Millisecond, func(context.Context) bool { return false })
	if err == nil {
		t.Fatal("waitFor succeeded on a dead process")
	}
	msg := err.Error()
	for _, want := range []string{"comp exited before ready", "exit status 3", "line 40", "address already in use"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 11\n") {
		t.Errorf("error quotes more than %d lines:\n%s", logTailLines, msg)
	}
	if !p.bindFailed() {
		t.Error("bindFailed = false")
	}
	if !strings.Contains(side.String(), "[comp] line 1\n") {
		t.Errorf("side channel lacks prefixed output: %q", side.String())
	}
	data, err := os.ReadFile(filepath.Join(filepath.Dir(p.logPath), "comp.log"))
	if err != nil || !strings.HasPrefix(string(data), "line 1\n") {
		t.Errorf("log file = %q, %v", data, err)
	}
}

func TestProcessWaitForDeadline(t *testing.T) {
	p, err := startProcess("sleeper", "/bin/sh", []string{"-c", "echo starting; sleep 300"}, nil, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.stop()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errors.New("deadline 50ms"))
	defer cancel()
	err = p.waitFor(ctx, "ready", 10*time.Millisecond, func(context.Context) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "sleeper not ready: deadline 50ms (still running)") {
		t.Errorf("err = %v", err)
	}
	calls := 0
	err = p.waitFor(context.Background(), "ready", time.Millisecond, func(context.Context) bool { calls++; return calls == 3 })
	if err != nil || calls != 3 {
		t.Errorf("waitFor = %v after %d checks, want nil after 3", err, calls)
	}
}

func TestPrefixWriterSplitsLines(t *testing.T) {
	var out bytes.Buffer
	w := &prefixWriter{prefix: "[x] ", w: &out}
	for _, chunk := range []string{"par", "tial\nwhole\n", "a\nb", "\n"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if want := "[x] partial\n[x] whole\n[x] a\n[x] b\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := freePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Errorf("ports %v: bad or repeated %d", ports, p)
		}
		seen[p] = true
	}
}

// TestAwaitFlagsPortRace checks that a component that lost its port to
// another process makes Start retry, and any other failure does not.
func TestAwaitFlagsPortRace(t *testing.T) {
	tests := []struct {
		name, script string
		portTaken    bool
	}{
		{"bind failure", `echo "failed to listen on 127.0.0.1:1: bind: address already in use" >&2; exit 1`, true},
		{"other failure", `echo "invalid flag" >&2; exit 1`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Cluster{log: slog.New(slog.DiscardHandler)}
			p, err := startProcess("comp", "/bin/sh", []string{"-c", tt.script}, nil, t.TempDir(), nil)
			if err != nil {
				t.Fatal(err)
			}
			err = c.await(context.Background(), p, "ready", time.Minute, func(context.Context) bool { return false })
			if err == nil || errors.Is(err, errPortTaken) != tt.portTaken {
				t.Errorf("await = %v; want errPortTaken: %v", err, tt.portTaken)
			}
		})
	}
}
