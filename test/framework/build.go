package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// RepoRoot is the directory holding the module's go.mod, found from this
// file's path so suites run from any working directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// Build compiles the main package pkg (an import path or a path relative to
// the repository root, such as ./cmd/inferpick) into dir, with flags such as
// -race added to go build, and returns the binary's path.
func Build(ctx context.Context, dir, pkg string, flags ...string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	args := append([]string{"build", "-o", out}, flags...)
	cmd := exec.CommandContext(ctx, "go", append(args, pkg)...)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// binaries are the binaries Binary built in this process, by package and
// flags.
var binaries struct {
	mu    sync.Mutex
	dir   string
	paths map[string]string
}

// Binary returns the path of pkg built with flags, building it on the first
// call in this test process; later calls, from any test, reuse it. The
// binaries go to a directory that RemoveBinaries deletes (call it from
// TestMain after m.Run).
func Binary(t testing.TB, pkg string, flags ...string) string {
	t.Helper()
	path, err := BinaryErr(t.Context(), pkg, flags...)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// BinaryErr is Binary for callers without a testing.TB, such as TestMain.
func BinaryErr(ctx context.Context, pkg string, flags ...string) (string, error) {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	key := pkg + " " + strings.Join(flags, " ")
	if p, ok := binaries.paths[key]; ok {
		return p, nil
	}
	if binaries.dir == "" {
		dir, err := os.MkdirTemp("", "inferpick-test-bin-")
		if err != nil {
			return "", err
		}
		binaries.dir, binaries.paths = dir, map[string]string{}
	}
	dir, err := os.MkdirTemp(binaries.dir, "")
	if err != nil {
		return "", err
	}
	p, err := Build(ctx, dir, pkg, flags...)
	if err != nil {
		return "", err
	}
	binaries.paths[key] = p
	return p, nil
}

// RemoveBinaries deletes what Binary built.
func RemoveBinaries() {
	binaries.mu.Lock()
	defer binaries.mu.Unlock()
	if binaries.dir != "" {
		_ = os.RemoveAll(binaries.dir)
		binaries.dir, binaries.paths = "", nil
	}
}
