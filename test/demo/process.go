package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"
)

// process is a child the demo started, in its own process group so that
// stopping it stops anything it started too.
type process struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{}
	err    error // valid once exited is closed
}

// startProcess runs argv with its output in logPath. When announce is not
// empty it waits, up to deadline, for that text to appear on the output.
func startProcess(ctx context.Context, name, logPath, announce string, deadline time.Duration, argv ...string) (*process, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	w := &announceWriter{w: logFile, want: []byte(announce), seen: make(chan struct{})}
	if announce == "" {
		close(w.seen)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = childAttr()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logFile, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()

	timer := time.NewTimer(deadline)
	defer timer.Stop()
	select {
	case <-w.seen:
		return p, nil
	case <-p.exited:
		exit := p.err
		if exit == nil {
			exit = errors.New("exit status 0")
		}
		err = fmt.Errorf("%s exited before it was ready (%w); see %s", name, exit, logPath)
	case <-timer.C:
		err = fmt.Errorf("%s did not say %q within %s; see %s", name, announce, deadline, logPath)
	case <-ctx.Done():
		err = ctx.Err()
	}
	return nil, errors.Join(err, p.stop(5*time.Second))
}

// stop asks the process group to terminate, waits up to grace, then kills it.
func (p *process) stop(grace time.Duration) error {
	defer func() { _ = p.log.Close() }()
	select {
	case <-p.exited:
		return nil
	default:
	}
	signalGroup(p.cmd.Process.Pid, false)
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-p.exited:
		return nil
	case <-timer.C:
	}
	signalGroup(p.cmd.Process.Pid, true)
	<-p.exited
	return fmt.Errorf("%s did not stop within %s and was killed", p.name, grace)
}

// announceWriter copies a child's output to w and closes seen once want has
// appeared in it.
type announceWriter struct {
	w    *os.File
	want []byte
	mu   sync.Mutex
	buf  []byte
	seen chan struct{}
	done bool
}

func (a *announceWriter) Write(p []byte) (int, error) {
	a.mu.Lock()
	if !a.done && len(a.want) > 0 {
		a.buf = append(a.buf, p...)
		if bytes.Contains(a.buf, a.want) {
			a.done = true
			a.buf = nil
			close(a.seen)
		} else if keep := len(a.want) - 1; len(a.buf) > keep {
			a.buf = a.buf[len(a.buf)-keep:]
		}
	}
	a.mu.Unlock()
	return a.w.Write(p)
}
