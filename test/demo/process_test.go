package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// alive reports whether pid still runs (a zombie counts as gone).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err != nil || !strings.Contains(string(stat), ") Z ")
}

func TestStopEndsTheWholeProcessGroup(t *testing.T) {
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "child.pid")
	p, err := startProcess(t.Context(), "sh", filepath.Join(dir, "sh.log"), "ready", 30*time.Second,
		"sh", "-c", "sleep 300 & echo $! > "+pidFile+"; echo ready; wait")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	child, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.stop(10 * time.Second); err != nil {
		t.Errorf("stop: %v", err)
	}
	t.Cleanup(func() {
		if alive(child) {
			_ = syscall.Kill(child, syscall.SIGKILL)
		}
	})
	framework.Eventually(t, framework.Timeout, "the child's own child gone after stop", func() error {
		if alive(child) {
			return fmt.Errorf("pid %d still runs", child)
		}
		return nil
	})
}

func TestStartProcessReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	_, err := startProcess(t.Context(), "false", filepath.Join(dir, "false.log"), "never said", 30*time.Second, "false")
	if err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Errorf("startProcess(false) = %v, want an early-exit error", err)
	}
}
