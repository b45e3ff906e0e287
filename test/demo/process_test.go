package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestAnnounceWriterFindsTextSplitAcrossWrites(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := &announceWriter{w: f, want: []byte("listening on"), seen: make(chan struct{})}
	for _, part := range []string{"starting\nvllm-sim list", "en", "ing on http://127.0.0.1:1\n", "more\n"} {
		if _, err := w.Write([]byte(part)); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-w.seen:
	default:
		t.Fatal("announcement split over three writes was not seen")
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if want := "starting\nvllm-sim listening on http://127.0.0.1:1\nmore\n"; string(got) != want {
		t.Errorf("log holds %q, want %q", got, want)
	}
}

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
	deadline := time.Now().Add(10 * time.Second)
	for alive(child) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if alive(child) {
		_ = syscall.Kill(child, syscall.SIGKILL)
		t.Errorf("the child's own child %d outlived stop", child)
	}
}

func TestStartProcessReportsEarlyExit(t *testing.T) {
	dir := t.TempDir()
	_, err := startProcess(t.Context(), "false", filepath.Join(dir, "false.log"), "never said", 30*time.Second, "false")
	if err == nil || !strings.Contains(err.Error(), "exited before it was ready") {
		t.Errorf("startProcess(false) = %v, want an early-exit error", err)
	}
}
