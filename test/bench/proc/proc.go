// Package proc runs the benchmark's helper processes (the simulators and
// the picker binary) on test/framework, waits for them to serve, and reads
// how much CPU they used from /proc.
package proc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// BuildTags are the tags the picker is built and benchmarked with (see the
// Makefile's BUILD_TAGS).
const BuildTags = "vtprotobuf"

// Build compiles the main package pkg (an import path or ./dir) into dir
// and returns the binary's path.
func Build(ctx context.Context, dir, pkg string) (string, error) {
	return framework.Build(ctx, dir, pkg, "-tags", BuildTags)
}

// Process is a started child process (test/framework's) whose log file is
// removed when it is stopped.
type Process struct {
	*framework.Process
}

// Start runs bin with args, its output in a temporary log file.
func Start(name, bin string, args ...string) (*Process, error) {
	return StartEnv(name, bin, nil, args...)
}

// Stop sends SIGTERM, waits up to grace, then kills the process; it removes
// the log file.
func (p *Process) Stop(grace time.Duration) {
	_ = p.Process.Stop(grace)
	_ = os.Remove(p.LogPath())
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/<pid>/stat times;
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// CPUSeconds returns the user plus system CPU time the process has used.
func (p *Process) CPUSeconds() (float64, error) {
	return CPUSecondsOf(p.Pid())
}

// IdleRate is the process's CPU seconds per second over d, taken when
// nothing is asked of it: its own background work (scraping, timers), which
// a measurement under load takes off.
func (p *Process) IdleRate(ctx context.Context, d time.Duration) (float64, error) {
	c0, err := p.CPUSeconds()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(d):
	}
	c1, err := p.CPUSeconds()
	return (c1 - c0) / d.Seconds(), err
}

// CPUSecondsOf returns the CPU time pid has used: the sum of its threads'
// time on a CPU from /proc/<pid>/task/*/schedstat, in nanoseconds, where
// the kernel keeps it; else utime plus stime from /proc/<pid>/stat, in
// clock ticks of 10 ms. Ticks are too coarse for a phase of a few hundred
// milliseconds of CPU: the controller bench's steady churn spends about
// 0.2 s, and an idle rate taken over 2 s in ticks is off by up to 5 ms a
// second. A thread that exits takes its time out of the sum; the Go
// processes measured here keep theirs.
func CPUSecondsOf(pid int) (float64, error) {
	if s, ok := schedstatSeconds(pid); ok {
		return s, nil
	}
	return statSeconds(pid)
}

// schedstatSeconds sums the first field (nanoseconds on a CPU) of every
// thread's schedstat; false when the kernel keeps none.
func schedstatSeconds(pid int) (float64, bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil || len(tasks) == 0 {
		return 0, false
	}
	var ns uint64
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread exited since the listing
		}
		f, _, _ := strings.Cut(string(b), " ")
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, false
		}
		ns += v
	}
	return float64(ns) / 1e9, true
}

// statSeconds reads utime and stime of pid from /proc/<pid>/stat.
func statSeconds(pid int) (float64, error) {
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

// WaitHTTP polls url until ok accepts the answer, p exits, or timeout.
func WaitHTTP(p *Process, url string, timeout time.Duration, ok func(*http.Response) bool) error {
	client := &http.Client{Timeout: time.Second}
	return framework.PollTimeout(timeout, func() error {
		resp, err := client.Get(url)
		if err == nil {
			good := ok == nil && resp.StatusCode == http.StatusOK || ok != nil && ok(resp)
			_ = resp.Body.Close()
			if good {
				return nil
			}
			err = fmt.Errorf("answer %q not accepted", resp.Status)
		}
		if p != nil && p.Exited() {
			exit := p.Err()
			if exit == nil {
				exit = errors.New("exit status 0")
			}
			return framework.Stop(fmt.Errorf("%s exited before serving %s: %w\n%s", p.Name(), url, exit, p.Output()))
		}
		return fmt.Errorf("%s not serving %s: %w", p.Name(), url, err)
	})
}

// StartEnv is Start with env added to the child's environment.
func StartEnv(name, bin string, env []string, args ...string) (*Process, error) {
	f, err := os.CreateTemp("", "inferpick-bench-*.log")
	if err != nil {
		return nil, fmt.Errorf("start %s: log: %w", name, err)
	}
	_ = f.Close()
	p, err := framework.Start(framework.Cmd{Name: name, Path: bin, Args: args, Env: env, Log: f.Name()})
	if err != nil {
		_ = os.Remove(f.Name())
		return nil, err
	}
	return &Process{p}, nil
}
