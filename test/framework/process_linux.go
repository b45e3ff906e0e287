package framework

import "syscall"

// childAttr puts a child in its own process group and has the kernel send it SIGTERM
// if this process dies without stopping it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
