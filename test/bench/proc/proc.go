// Package proc runs the benchmark's helper processes (the simulators and
// the picker binary), waits for them to serve, and reads how much CPU they
// used from /proc.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// BuildTags are the tags the picker is built and benchmarked with (see the
// Makefile's BUILD_TAGS).
const BuildTags = "vtprotobuf"

// Build compiles the main package pkg (an import path or ./dir) into dir
// and returns the binary's path.
func Build(ctx context.Context, dir, pkg string) (string, error) {
	out := filepath.Join(dir, filepath.Base(pkg))
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", BuildTags, "-o", out, pkg)
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", pkg, err, b)
	}
	return out, nil
}

// Process is a started child process. Its output is kept (the last 64 KB)
// to explain a failure.
type Process struct {
	name string
	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
	err  error
}

// Start runs bin with args.
func Start(name, bin string, args ...string) (*Process, error) {
	t := &tail{}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = t, t
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{name: name, cmd: cmd, out: t, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Output returns the end of what the process wrote.
func (p *Process) Output() string { return p.out.String() }

// Exited reports whether the process has ended.
func (p *Process) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop sends SIGTERM, waits up to grace, then kills the process.
func (p *Process) Stop(grace time.Duration) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds returns the user plus system CPU time the process has used.
func (p *Process) CPUSeconds() (float64, error) {
	return CPUSecondsOf(p.Pid())
}

// CPUSecondsOf reads utime and stime of pid from /proc/<pid>/stat.
func CPUSecondsOf(pid int) (float64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	// The command name (field 2) may hold spaces: count from its ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("cpu of %d: malformed stat", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("cpu of %d: short stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("cpu of %d: %w", pid, err)
	}
	return float64(ut+st) / clockTicks, nil
}

// SelfCPUSeconds returns this process's user plus system CPU time.
func SelfCPUSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// FreePort returns a TCP port free on host at the time of the call.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// WaitHTTP polls url until ok accepts the answer, p exits, or timeout.
func WaitHTTP(p *Process, url string, timeout time.Duration, ok func(*http.Response) bool) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for {
		resp, err := client.Get(url)
		if err == nil {
			good := ok == nil && resp.StatusCode == http.StatusOK || ok != nil && ok(resp)
			resp.Body.Close()
			if good {
				return nil
			}
			err = fmt.Errorf("answer %q not accepted", resp.Status)
		}
		if p != nil && p.Exited() {
			exit := p.err
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return fmt.Errorf("%s exited before serving %s: %w\n%s", p.name, url, exit, p.Output())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not serving %s after %v: %w", p.name, url, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tail keeps the last 64 KB written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - 64<<10; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
