package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// process is a child the demo started (test/framework's), in its own
// process group so that stopping it stops anything it started too.
type process struct {
	*framework.Process
	exited <-chan struct{}
}

// startProcess runs argv with its output in logPath (replacing an earlier
// run's). When announce is not empty it waits, up to deadline, for that text
// to appear on the output.
func startProcess(ctx context.Context, name, logPath, announce string, deadline time.Duration, argv ...string) (*process, error) {
	if err := os.Remove(logPath); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	fp, err := framework.Start(framework.Cmd{Name: name, Path: argv[0], Args: argv[1:], Log: logPath})
	if err != nil {
		return nil, err
	}
	p := &process{Process: fp, exited: fp.Done()}
	if announce == "" {
		return p, nil
	}
	if _, err := fp.WaitFor(ctx, deadline, announce); err != nil {
		return nil, errors.Join(err, p.Stop(5*time.Second))
	}
	return p, nil
}
