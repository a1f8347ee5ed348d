package childproc

import "syscall"

// sysProcAttr puts the child in its own process group, so that Stop kills
// anything it forks, and kills it if the test binary dies without calling
// Stop. Pdeathsig fires when the forking OS thread exits, which the Go
// runtime only does for goroutines that exit while locked to their thread.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
