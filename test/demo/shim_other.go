//go:build !linux

package main

// shimsSupported says whether the control plane runs through shims.
const shimsSupported = false

// runShim does nothing where there is no parent-death signal.
func runShim() {}
