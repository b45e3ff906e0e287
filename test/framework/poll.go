package framework

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// Named timeouts for polls. A poll ends as soon as its condition holds;
// these only bound how long a broken run takes to fail.
const (
	// Timeout is the default: a process starting, a controller syncing.
	Timeout = 30 * time.Second
	// LongTimeout is for what waits on a lease, a restart or a drain.
	LongTimeout = 90 * time.Second
	// PollInterval is how often a condition is checked.
	PollInterval = 25 * time.Millisecond
)

// stopError ends a poll at once with its error.
type stopError struct{ err error }

func (s stopError) Error() string { return s.err.Error() }
func (s stopError) Unwrap() error { return s.err }

// Stop wraps err so that Poll and Eventually give up at once instead of
// retrying (a process that exited will not start listening).
func Stop(err error) error { return stopError{err} }

// Poll checks cond every PollInterval until it returns nil, returns an error
// wrapped by Stop, ctx ends, or timeout passes; it then returns cond's last
// error.
func Poll(ctx context.Context, timeout time.Duration, cond func() error) error {
	return poll(ctx.Done(), timeout, cond)
}

// poll is Poll ending early when done is closed (never when it is nil).
func poll(done <-chan struct{}, timeout time.Duration, cond func() error) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(PollInterval)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if s, ok := errors.AsType[stopError](err); ok {
			return s.err
		}
		select {
		case <-done:
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-deadline.C:
			return fmt.Errorf("after %s: %w", timeout, err)
		case <-tick.C:
		}
	}
}

// Eventually polls cond until it returns nil and returns how long that
// took; after timeout (or an error wrapped by Stop) it fails the test with
// what and cond's last error.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) time.Duration {
	t.Helper()
	start := time.Now()
	if err := Poll(context.Background(), timeout, cond); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return time.Since(start)
}

// PollTimeout is Poll for callers without a context (the benchmark's
// process start-up): it ends only on cond or timeout.
func PollTimeout(timeout time.Duration, cond func() error) error {
	return poll(nil, timeout, cond)
}
