package localcluster

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// stopGrace is how long a component gets to exit after SIGTERM before its
// process group is killed.
const stopGrace = 5 * time.Second

// logTailLines is how much of a component's log start errors quote.
const logTailLines = 30

// process is one running control-plane component.
type process struct {
	name    string
	logPath string
	cmd     *exec.Cmd
	grace   time.Duration // SIGTERM to SIGKILL
	done    chan struct{} // closed when the process has exited
	waitErr error         // valid after done is closed
}

// startProcess runs bin with args in its own process group, logging stdout
// and stderr to logDir/<name>.log and, if extra is not nil, to extra with a
// "[name] " prefix on every line.
func startProcess(name, bin string, args, env []string, logDir string, extra io.Writer) (*process, error) {
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out io.Writer = f
	if extra != nil {
		out = io.MultiWriter(f, &prefixWriter{prefix: "[" + name + "] ", w: extra})
	}
	cmd.Stdout, cmd.Stderr = out, out
	// A process group lets Stop kill anything a component forks; Pdeathsig
	// kills the component if the test binary dies without calling Stop.
	// Pdeathsig fires when the forking OS thread exits, which the Go runtime
	// only does for goroutines that exit while locked to their thread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// Without WaitDelay, Wait would block on the output pipe for as long as
	// any descendant holds it open.
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, cmd: cmd, grace: stopGrace, done: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// failure describes why the component is unusable: how it exited, if it did,
// and the end of its log.
func (p *process) failure(what string) error {
	state := "still running"
	if p.exited() {
		state = fmt.Sprintf("exited: %v", p.waitErr)
	}
	return fmt.Errorf("%s %s (%s); last lines of %s:\n%s", p.name, what, state, p.logPath, p.logTail())
}

// logTail returns the last logTailLines lines of the component's log.
func (p *process) logTail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return strings.Join(lines, "\n")
}

// stop sends SIGTERM to the process group, SIGKILL after p.grace, and waits
// for the process to exit. It returns nil if the process had already exited.
func (p *process) stop() error {
	if p.exited() {
		return nil
	}
	pgid := p.cmd.Process.Pid // Setpgid makes the pid the group id
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("terminate %s: %w", p.name, err)
	}
	timer := time.NewTimer(p.grace)
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

// waitFor polls check every interval until it returns true, the process
// exits, or ctx ends. The error names the component and quotes its log.
func (p *process) waitFor(ctx context.Context, what string, interval time.Duration, check func(context.Context) bool) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if check(ctx) {
			return nil
		}
		select {
		case <-p.done:
			return p.failure("exited before " + what)
		case <-ctx.Done():
			return p.failure(fmt.Sprintf("not %s: %v", what, context.Cause(ctx)))
		case <-ticker.C:
		}
	}
}

// bindFailed reports whether the component's log shows it lost a race for
// one of its ports.
func (p *process) bindFailed() bool {
	return strings.Contains(p.logTail(), "address already in use")
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1. Another
// process may take one before the component binds it; Start retries then.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("find a free port: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// prefixWriter prefixes every line written through it; safe for concurrent
// use by several processes sharing one destination.
type prefixWriter struct {
	prefix string
	w      io.Writer
	buf    []byte
}

var prefixMu sync.Mutex // serializes writes to shared destinations

func (pw *prefixWriter) Write(b []byte) (int, error) {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	pw.buf = append(pw.buf, b...)
	for {
		i := bytes.IndexByte(pw.buf, '\n')
		if i < 0 {
			break
		}
		// A broken side channel must not stop the component: the log file
		// still gets everything, so write errors are dropped.
		_, _ = fmt.Fprintf(pw.w, "%s%s\n", pw.prefix, pw.buf[:i])
		pw.buf = pw.buf[i+1:]
	}
	return len(b), nil
}

// lastLine returns the last non-empty line of out, for error messages.
func lastLine(out []byte) string {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if s := strings.TrimSpace(sc.Text()); s != "" {
			last = s
		}
	}
	return last
}
