package engine

import (
	"context"
	"time"
)

// Pacer turns the simulated cost of a step into waiting. Wait returns the
// context's error if it ends first.
type Pacer interface {
	Wait(ctx context.Context, simulated time.Duration) error
}

// maxLag is how far a WallPacer may fall behind its schedule and still
// catch up by skipping sleeps; beyond it the schedule restarts from now.
const maxLag = 20 * time.Millisecond

// WallPacer sleeps Scale × the simulated time (Scale 0.01 runs 100× faster
// than simulated time; Scale 0 does not sleep). It keeps a running deadline
// so that timer overshoot does not add up over many short steps. It is used
// by one goroutine at a time.
type WallPacer struct {
	Scale    float64
	deadline time.Time
}

var _ Pacer = (*WallPacer)(nil)

// Wait implements Pacer.
func (p *WallPacer) Wait(ctx context.Context, simulated time.Duration) error {
	scaled := time.Duration(float64(simulated) * p.Scale)
	if scaled <= 0 {
		return ctx.Err()
	}
	now := time.Now()
	if p.deadline.Before(now.Add(-maxLag)) {
		p.deadline = now
	}
	p.deadline = p.deadline.Add(scaled)
	wait := p.deadline.Sub(now)
	if wait <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
