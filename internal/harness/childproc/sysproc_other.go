//go:build unix && !linux

package childproc

import "syscall"

// sysProcAttr puts the child in its own process group, so that Stop kills
// anything it forks. Only Linux can also tie the child's life to the test
// binary's (Pdeathsig): elsewhere a test binary killed outright leaves its
// children running.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
