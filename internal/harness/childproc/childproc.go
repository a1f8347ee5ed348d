// Package childproc runs the local processes the test harness starts (the
// control plane's components, the adapter, Prometheus): each in its own
// process group, its output appended to a log file, stopped with SIGTERM
// and then SIGKILL for the whole group.
package childproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultGrace is how long a process gets to exit after SIGTERM before its
// process group is killed.
const DefaultGrace = 5 * time.Second

// LogTailLines is how much of a process's log its errors quote.
const LogTailLines = 30

// Process is one running child process.
type Process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	// Grace is the time from SIGTERM to SIGKILL; set it before Stop.
	Grace   time.Duration
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
}

// Start runs bin with args and env added to this process's environment,
// in its own process group, appending stdout and stderr to logPath and,
// if extra is not nil, to extra with a "[name] " prefix on every line.
func Start(name, bin string, args, env []string, logPath string, extra io.Writer) (*Process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out io.Writer = f
	if extra != nil {
		out = io.MultiWriter(f, &PrefixWriter{Prefix: "[" + name + "] ", W: extra})
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	// Without WaitDelay, Wait would block on the output pipe for as long as
	// any descendant holds it open.
	cmd.WaitDelay = DefaultGrace
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, logPath: logPath, cmd: cmd, Grace: DefaultGrace, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Name is the name the process was started with.
func (p *Process) Name() string { return p.name }

// LogPath is the file its output goes to.
func (p *Process) LogPath() string { return p.logPath }

// Pid is the process's id, which is also its process group's.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited; Err then says how.
func (p *Process) Done() <-chan struct{} { return p.done }

// Err is how the process exited; valid once Done is closed.
func (p *Process) Err() error {
	<-p.done
	return p.waitErr
}

// Exited reports whether the process has exited.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Failure describes why the process is unusable: how it exited, if it
// did, and the end of its log.
func (p *Process) Failure(what string) error {
	state := "still running"
	if p.Exited() {
		state = fmt.Sprintf("exited: %v", p.waitErr)
	}
	return fmt.Errorf("%s %s (%s); last lines of %s:\n%s", p.name, what, state, p.logPath, p.LogTail())
}

// LogTail returns the last LogTailLines lines of the process's log.
func (p *Process) LogTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > LogTailLines {
		lines = lines[len(lines)-LogTailLines:]
	}
	return strings.Join(lines, "\n")
}

// Stop sends SIGTERM to the process group, SIGKILL after Grace, and waits
// for the process to exit. It returns nil if the process had already
// exited.
func (p *Process) Stop() error {
	if p.Exited() {
		return nil
	}
	pgid := p.Pid() // Setpgid makes the pid the group id
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("terminate %s: %w", p.name, err)
	}
	timer := time.NewTimer(p.Grace)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill %s: %w", p.name, err)
		}
		<-p.done
	}
	// Reap stragglers that outlived the group leader's SIGTERM handling.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	return nil
}

// WaitFor polls check every interval until it returns true, the process
// exits, or ctx ends. The error names the process and quotes its log.
func (p *Process) WaitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) bool) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if check(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return p.Failure("exited before " + what)
		case <-ctx.Done():
			return p.Failure(fmt.Sprintf("not %s: %v", what, context.Cause(ctx)))
		case <-ticker.C:
		}
	}
}

// BindFailed reports whether the process's log shows it lost a race for
// one of its ports.
func (p *Process) BindFailed() bool {
	return strings.Contains(p.LogTail(), "address already in use")
}

// PrefixWriter prefixes every line written through it; safe for
// concurrent use by several processes sharing one destination.
type PrefixWriter struct {
	Prefix string
	W      io.Writer
	buf    []byte
}

var prefixMu sync.Mutex // serializes writes to shared destinations

func (pw *PrefixWriter) Write(b []byte) (int, error) {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	pw.buf = append(pw.buf, b...)
	for {
		i := bytes.IndexByte(pw.buf, '\n')
		if i < 0 {
			break
		}
		// A broken side channel must not stop the process: the log file
		// still gets everything, so write errors are dropped.
		_, _ = fmt.Fprintf(pw.W, "%s%s\n", pw.Prefix, pw.buf[:i])
		pw.buf = pw.buf[i+1:]
	}
	return len(b), nil
}
