package reliability

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFlowControlQueuesInsteadOfRefusing sends more streaming requests than
// the pool admits (one in flight, maxInFlight 1) through the gateway to a
// picker with --flow-control: none is refused, the waiting ones hold no
// load, each is dispatched when the one before ends, and the queue and the
// load end at zero.
func TestFlowControlQueuesInsteadOfRefusing(t *testing.T) {
	sim := startSim(t, "127.0.0.80", 0)
	p := startPicker(t, "--static-endpoints", sim.addr, "--flow-control", "--config-text", "policy:\n  maxInFlight: 1\n")
	p.WaitWorkers(t, 1)
	g := startGateway(t, p.Addr())

	const requests = 6
	r := rand.New(rand.NewPCG(8, 8))
	errs := make(chan error, requests)
	var wg sync.WaitGroup
	for range requests {
		body := completion(randomPrompt(r, 8), 40, true)
		wg.Go(func() {
			resp, err := g.Post(t.Context(), "/v1/completions", body, nil)
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(out), "[DONE]")) {
				err = fmt.Errorf("status %d: %.200s", resp.StatusCode, out)
			}
			errs <- err
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	maxLoad := int64(0)
	for sampling := true; sampling; {
		select {
		case <-done:
			sampling = false
		case <-time.After(5 * time.Millisecond):
			if v, err := p.Workers(); err == nil && len(v.Workers) == 1 {
				maxLoad = max(maxLoad, v.Workers[0].Load)
			}
		}
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("request: %v", err)
		}
	}
	if maxLoad > 1 {
		t.Errorf("the worker held %d requests at once, want at most 1: queued requests hold no load", maxLoad)
	}
	p.WaitIdle(t, 10*time.Second)
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := pp.Sum("inferpick_flowcontrol_requests_total", "outcome", "dispatched"); n < 1 {
		t.Errorf("%v requests dispatched from the queue, want the ones that waited", n)
	}
	if n := pp.Sum("inferpick_flowcontrol_queue_length"); n != 0 {
		t.Errorf("queue length %v after every request ended", n)
	}
	if n := pp.Sum("inferpick_requests_total", "code", "429"); n != 0 {
		t.Errorf("%v requests refused with 429, want none", n)
	}
	checkReleases(t, p)
}
