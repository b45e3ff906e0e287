package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tally counts requests as the client sends them.
type tally struct {
	total                          int
	inFlight, done, aborted, fails atomic.Int64
}

func (t *tally) started() { t.inFlight.Add(1) }

func (t *tally) finished(o outcome) {
	t.inFlight.Add(-1)
	t.done.Add(1)
	switch {
	case o.Err != nil:
		t.fails.Add(1)
	case o.Aborted:
		t.aborted.Add(1)
	}
}

// tallySnapshot is one reading of a tally.
type tallySnapshot struct {
	Total, InFlight, Done, Aborted, Failed int
}

func (t *tally) snapshot() tallySnapshot {
	return tallySnapshot{
		Total:    t.total,
		InFlight: int(t.inFlight.Load()),
		Done:     int(t.done.Load()),
		Aborted:  int(t.aborted.Load()),
		Failed:   int(t.fails.Load()),
	}
}

const barWidth = 30

// progressLine renders a snapshot as one line with a bar of barWidth cells.
func progressLine(s tallySnapshot, elapsed time.Duration) string {
	filled := 0
	if s.Total > 0 {
		filled = s.Done * barWidth / s.Total
	}
	return fmt.Sprintf("[%s%s] %d/%d done, %d in flight, %d aborted, %d failed, %s",
		strings.Repeat("#", filled), strings.Repeat(".", barWidth-filled),
		s.Done, s.Total, s.InFlight, s.Aborted, s.Failed, elapsed.Round(100*time.Millisecond))
}

// progress draws a tally on w until stopped: a line redrawn in place with
// "\r" on a terminal, a new line every few seconds otherwise.
type progress struct {
	w        io.Writer
	t        *tally
	terminal bool
	start    time.Time
	stop     context.CancelFunc
	wg       sync.WaitGroup
}

func startProgress(ctx context.Context, w io.Writer, t *tally, quiet bool) *progress {
	p := &progress{w: w, t: t, terminal: isTerminal(w), start: time.Now()}
	ctx, p.stop = context.WithCancel(ctx)
	if quiet {
		return p
	}
	every := 5 * time.Second
	if p.terminal {
		every = 200 * time.Millisecond
	}
	p.wg.Go(func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				p.draw(true)
				return
			case <-tick.C:
				p.draw(false)
			}
		}
	})
	return p
}

func (p *progress) draw(last bool) {
	line := progressLine(p.t.snapshot(), time.Since(p.start))
	switch {
	case p.terminal && last:
		fmt.Fprintf(p.w, "\r%s\n", line)
	case p.terminal:
		fmt.Fprintf(p.w, "\r%s", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// finish draws the final state and returns once the drawing has stopped.
func (p *progress) finish() {
	p.stop()
	p.wg.Wait()
}

// isTerminal reports whether w is a character device such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
