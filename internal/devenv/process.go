package devenv

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// child is a local process in its own process group, killed if the test
// process dies, with its output appended to a log file.
type child struct {
	cmd *exec.Cmd
	// done is closed when the process has exited; err then holds
	// cmd.Wait's result. Closing (not sending) lets any number of
	// readers, stop included, observe the exit.
	done chan struct{}
	err  error
	log  *os.File
}

// startChild starts bin with args, logging to logPath.
func startChild(logPath, bin string, args ...string) (*child, error) {
	return startChildEnv(logPath, nil, bin, args...)
}

// startChildEnv is startChild with env added to this process's
// environment.
func startChildEnv(logPath string, env []string, bin string, args ...string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	c := &child{cmd: cmd, done: make(chan struct{}), log: logFile}
	go func() { c.err = cmd.Wait(); close(c.done) }()
	return c, nil
}

// stop sends SIGTERM to the process group, then SIGKILL after 5s, waits,
// and closes the log.
func (c *child) stop() {
	defer c.log.Close()
	_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.done
	}
}
