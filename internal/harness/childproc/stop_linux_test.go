package childproc

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// groupSize counts the live processes of a group, from /proc. Zombies do
// not count: killed grandchildren are reparented to PID 1, which in a
// container may never reap them.
func groupSize(t *testing.T, pgid int) int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
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
			n++
		}
	}
	return n
}

func TestStopKillsGroup(t *testing.T) {
	tests := []struct {
		name   string
		script string
		grace  time.Duration
	}{
		// The shell forks a grandchild; both must go.
		{"terminates on SIGTERM", "sleep 300 & sleep 300", time.Minute},
		// A process that ignores SIGTERM is killed after the grace period.
		{"ignores SIGTERM", `trap "" TERM; sleep 300 & sleep 300 & wait`, 200 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Start("sh", "/bin/sh", []string{"-c", tt.script}, nil, filepath.Join(t.TempDir(), "log"), nil)
			if err != nil {
				t.Fatal(err)
			}
			p.Grace = tt.grace
			pgid := p.Pid()
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true,
				func(context.Context) (bool, error) { return groupSize(t, pgid) >= 2, nil }); err != nil {
				t.Fatalf("the shell did not fork: %v", err)
			}
			if err := p.Stop(); err != nil {
				t.Fatal(err)
			}
			if !p.Exited() {
				t.Error("Stop returned before the process exited")
			}
			// SIGKILL is delivered asynchronously: a grandchild killed by
			// Stop's last signal may still be exiting when Stop returns, so
			// the group gets a moment to empty; a survivor keeps it non-empty.
			var n int
			if err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true,
				func(context.Context) (bool, error) { n = groupSize(t, pgid); return n == 0, nil }); err != nil {
				t.Errorf("%d processes of the group survived Stop", n)
			}
			if err := p.Stop(); err != nil {
				t.Errorf("second Stop: %v", err)
			}
		})
	}
}
