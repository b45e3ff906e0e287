package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// requestParam tags each request's URL with its plan ID so the gateway's
// record of where it went can be matched to its group.
const requestParam = "request"

// outcome is what the client saw of one request.
type outcome struct {
	ID     int
	Group  int
	Status int
	// TTFT runs from sending the request to the first event carrying
	// generated text; zero when none came.
	TTFT    time.Duration
	Aborted bool
	Err     error
}

// sender sends planned requests to the gateway.
type sender struct {
	http    *http.Client
	url     string
	timeout time.Duration
	tally   *tally
}

// runAll sends reqs with at most concurrency in flight and returns one
// outcome per request, in plan order. It stops early when ctx ends.
func (c *sender) runAll(ctx context.Context, reqs []request, concurrency int) []outcome {
	out := make([]outcome, len(reqs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(concurrency, len(reqs)) {
		wg.Go(func() {
			for i := range next {
				c.tally.started()
				out[i] = c.one(ctx, reqs[i])
				c.tally.finished(out[i])
			}
		})
	}
feed:
	for i := range reqs {
		select {
		case next <- i:
		case <-ctx.Done():
			for j := i; j < len(reqs); j++ {
				out[j] = outcome{ID: reqs[j].ID, Group: reqs[j].Group, Err: ctx.Err()}
			}
			break feed
		}
	}
	close(next)
	wg.Wait()
	return out
}

// one sends a streaming chat completion and reads it to [DONE], or cancels
// it after the first content event when the plan says so.
func (c *sender) one(ctx context.Context, req request) outcome {
	o := outcome{ID: req.ID, Group: req.Group}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	url := c.url + "?" + requestParam + "=" + strconv.Itoa(req.ID)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(req.Body))
	if err != nil {
		o.Err = fmt.Errorf("request %d: %w", req.ID, err)
		return o
	}
	hr.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := c.http.Do(hr)
	if err != nil {
		o.Err = fmt.Errorf("request %d: %w", req.ID, err)
		return o
	}
	defer func() { _ = resp.Body.Close() }()
	o.Status = resp.StatusCode
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		o.Err = fmt.Errorf("request %d: status %d: %s", req.ID, resp.StatusCode, bytes.TrimSpace(msg))
		return o
	}
	events := newEventReader(resp.Body)
	for {
		data, err := events.next()
		if errors.Is(err, io.EOF) {
			o.Err = fmt.Errorf("request %d: %w", req.ID, errNoDone)
			return o
		}
		if err != nil {
			o.Err = fmt.Errorf("request %d: %w", req.ID, err)
			return o
		}
		if isDone(data) {
			return o
		}
		if o.TTFT == 0 && hasContent(data) {
			o.TTFT = time.Since(start)
			if req.Abort {
				// The client walks away mid-stream, as a user closing a
				// chat window does.
				cancel()
				o.Aborted = true
				return o
			}
		}
	}
}
