package childproc

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFailureQuotesLog(t *testing.T) {
	var side bytes.Buffer
	script := `for i in $(seq 1 40); do echo "line $i"; done; echo "listen tcp 127.0.0.1:1: bind: address already in use" >&2; exit 3`
	logPath := filepath.Join(t.TempDir(), "comp.log")
	p, err := Start("comp", "/bin/sh", []string{"-c", script}, nil, logPath, &side)
	if err != nil {
		t.Fatal(err)
	}
	err = p.WaitFor(context.Background(), "ready", 10*time.Millisecond, func(context.Context) bool { return false })
	if err == nil {
		t.Fatal("WaitFor succeeded on a dead process")
	}
	msg := err.Error()
	for _, want := range []string{"comp exited before ready", "exit status 3", "line 40", "address already in use"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "line 11\n") {
		t.Errorf("error quotes more than %d lines:\n%s", LogTailLines, msg)
	}
	if !p.BindFailed() {
		t.Error("BindFailed = false")
	}
	if !strings.Contains(side.String(), "[comp] line 1\n") {
		t.Errorf("side channel lacks prefixed output: %q", side.String())
	}
	data, err := os.ReadFile(logPath)
	if err != nil || !strings.HasPrefix(string(data), "line 1\n") {
		t.Errorf("log file = %q, %v", data, err)
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "exit status 3") {
		t.Errorf("Err = %v, want exit status 3", err)
	}
}

func TestWaitForDeadline(t *testing.T) {
	p, err := Start("sleeper", "/bin/sh", []string{"-c", "echo starting; sleep 300"}, nil, filepath.Join(t.TempDir(), "log"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 50*time.Millisecond, errors.New("deadline 50ms"))
	defer cancel()
	err = p.WaitFor(ctx, "ready", 10*time.Millisecond, func(context.Context) bool { return false })
	if err == nil || !strings.Contains(err.Error(), "sleeper not ready: deadline 50ms (still running)") {
		t.Errorf("err = %v", err)
	}
	calls := 0
	err = p.WaitFor(context.Background(), "ready", time.Millisecond, func(context.Context) bool { calls++; return calls == 3 })
	if err != nil || calls != 3 {
		t.Errorf("WaitFor = %v after %d checks, want nil after 3", err, calls)
	}
}

func TestEnvAdded(t *testing.T) {
	logPath := filepath.Join(t.TempDir(), "log")
	p, err := Start("env", "/bin/sh", []string{"-c", `echo "$CHILDPROC_TEST"`}, []string{"CHILDPROC_TEST=yes"}, logPath, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Err(); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(logPath); string(data) != "yes\n" {
		t.Errorf("log = %q, want the added variable", data)
	}
}

func TestPrefixWriterSplitsLines(t *testing.T) {
	var out bytes.Buffer
	w := &PrefixWriter{Prefix: "[x] ", W: &out}
	for _, chunk := range []string{"par", "tial\nwhole\n", "a\nb", "\n"} {
		if n, err := w.Write([]byte(chunk)); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if want := "[x] partial\n[x] whole\n[x] a\n[x] b\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}
