//go:build unix

package framework

import "syscall"

// signalGroup sends SIGTERM, or SIGKILL when kill is set, to the process
// group led by pid.
func signalGroup(pid int, kill bool) {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	_ = syscall.Kill(-pid, sig)
}
