package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// The control-plane processes are started by envtest, which gives them a
// process group but no parent-death signal. To have them stop even when the
// demo is killed outright, envtest starts them through links to the demo's
// own executable: started under such a link, the demo asks the kernel for
// SIGTERM on its parent's death and replaces itself with the real binary
// (see runShim).

// shimTarget is the file, next to the links, naming the directory of the
// real binaries.
const shimTarget = "controlplane-dir"

// shimmed are the binaries envtest runs as long-lived processes.
var shimmed = []string{"etcd", "kube-apiserver"}

// prepareShims links each shimmed binary name in dir to this executable and
// records realDir as their home. It returns the path to run for each name.
func prepareShims(dir, realDir string) (map[string]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the demo executable: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("shim directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, shimTarget), []byte(realDir), 0o644); err != nil {
		return nil, fmt.Errorf("shim target: %w", err)
	}
	paths := make(map[string]string, len(shimmed))
	for _, name := range shimmed {
		link := filepath.Join(dir, name)
		_ = os.Remove(link)
		if err := os.Symlink(self, link); err != nil {
			return nil, fmt.Errorf("shim %s: %w", name, err)
		}
		paths[name] = link
	}
	return paths, nil
}

// shimOf returns the real binary this process stands in for, when it was
// started under one of the links prepareShims makes.
func shimOf(argv0 string) (string, bool) {
	name := filepath.Base(argv0)
	known := false
	for _, s := range shimmed {
		known = known || s == name
	}
	if !known {
		return "", false
	}
	realDir, err := os.ReadFile(filepath.Join(filepath.Dir(argv0), shimTarget))
	if err != nil {
		return "", false
	}
	return filepath.Join(string(realDir), name), true
}
