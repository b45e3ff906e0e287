package main

import (
	"fmt"
	"os"
	"syscall"
)

// shimsSupported says whether the control plane runs through shims.
const shimsSupported = true

// runShim returns at once unless this process is a control-plane shim. A
// shim arranges for SIGTERM when its parent (the demo) dies, then executes
// the real binary in its place; the setting survives the exec.
func runShim() {
	target, ok := shimOf(os.Args[0])
	if !ok {
		return
	}
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGTERM), 0); errno != 0 {
		fmt.Fprintf(os.Stderr, "%s: set parent-death signal: %v\n", os.Args[0], errno)
		os.Exit(1)
	}
	if os.Getppid() == 1 {
		// The demo died before the setting took effect.
		os.Exit(1)
	}
	err := syscall.Exec(target, append([]string{target}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "%s: exec %s: %v\n", os.Args[0], target, err)
	os.Exit(1)
}
