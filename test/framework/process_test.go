package framework

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestProcessAnnounceAndStop starts a shell that announces itself and
// ignores nothing: WaitFor returns the rest of the announce line, the log
// holds the output, and Stop ends it with SIGTERM.
func TestProcessAnnounceAndStop(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Cmd{Name: "sh", Path: "sh", Args: []string{"-c", "echo listening on 127.0.0.1:1234; exec sleep 60"},
		Log: filepath.Join(dir, "sh.log")})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := p.WaitFor(t.Context(), Timeout, "listening on ")
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:1234" {
		t.Errorf("WaitFor = %q, want the rest of the line", addr)
	}
	if err := p.Stop(10 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if !p.Exited() {
		t.Errorf("the process runs after Stop")
	}
	if !strings.Contains(p.Output(), "listening on 127.0.0.1:1234") {
		t.Errorf("Output() = %q, want the process's output", p.Output())
	}
}

// TestStopEndsTheProcessGroup checks that Stop ends a child's own children
// too, whether the child obeys SIGTERM or is killed after the grace period
// (with an error saying so).
func TestStopEndsTheProcessGroup(t *testing.T) {
	for name, tc := range map[string]struct {
		trap    string
		wantErr bool
	}{
		"obeys SIGTERM":   {},
		"ignores SIGTERM": {trap: `trap "" TERM; `, wantErr: true},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pidFile := filepath.Join(dir, "child.pid")
			p, err := Start(Cmd{Name: "sh", Path: "sh",
				Args: []string{"-c", tc.trap + `sleep 60 & echo $! > ` + pidFile + `; echo ready; wait`},
				Log:  filepath.Join(dir, "sh.log")})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.WaitFor(t.Context(), Timeout, "ready"); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(pidFile)
			if err != nil {
				t.Fatal(err)
			}
			child, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Stop(200 * time.Millisecond); (err != nil) != tc.wantErr {
				t.Errorf("Stop = %v, want an error %v", err, tc.wantErr)
			}
			// The grandchild was in the same process group: it is gone (or
			// a zombie waiting for init) too.
			Eventually(t, Timeout, "the grandchild gone", func() error {
				if err := syscall.Kill(child, 0); err == nil {
					stat, _ := os.ReadFile("/proc/" + strconv.Itoa(child) + "/stat")
					if !strings.Contains(string(stat), ") Z ") {
						return errors.New("still running")
					}
				}
				return nil
			})
		})
	}
}

// TestProcessExitBeforeAnnounce checks that WaitFor gives up at once when
// the process exits without announcing.
func TestProcessExitBeforeAnnounce(t *testing.T) {
	p := StartT(t, Cmd{Name: "false", Path: "false"})
	_, err := p.WaitFor(t.Context(), LongTimeout, "never said")
	if err == nil || !strings.Contains(err.Error(), "exited before") {
		t.Fatalf("WaitFor on an exiting process = %v, want an early-exit error", err)
	}
}

// TestFreePortOn checks that the port is free on every host asked.
func TestFreePortOn(t *testing.T) {
	hosts := Loopback(201, 3)
	port := FreePortT(t, hosts...)
	for _, h := range hosts {
		l, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			t.Fatalf("port %d is not free on %s: %v", port, h, err)
		}
		_ = l.Close()
	}
}
