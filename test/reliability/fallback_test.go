package reliability

import (
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// TestRetriesAndFallbacks routes over a server answering half its requests
// with 503, a listed server that is down (connection refused) and a healthy
// one. The gateway walks the picker's fallback list; every guard is
// released once, on the endpoint that ended up serving, and the release
// reasons add up to what the clients saw.
func TestRetriesAndFallbacks(t *testing.T) {
	flaky := startSim(t, "127.0.0.44", 0, "--fault-error-rate", "0.5", "--fault-error-status", "503")
	healthy := startSim(t, "127.0.0.45", 0)
	down := startSim(t, "127.0.0.46", 0)
	down.Stop(t)
	p := startPicker(t, "--static-endpoints", flaky.addr+","+healthy.addr+","+down.addr, "--fallbacks", "2")
	p.WaitWorkers(t, 3)

	// One gateway retries over the whole list (the recommended route), the
	// other never retries, so some requests end on an upstream error.
	retrying := startGateway(t, p.Addr())
	single := startGateway(t, p.Addr(), gateway.WithRetryPolicy(gateway.RetryPolicy{MaxAttempts: 1}))

	const perGateway = 150
	sampler := sampleLoads(p)
	var wg sync.WaitGroup
	for i, g := range []*gw{retrying, single} {
		for w := range 6 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(i), uint64(w)))
				for range perGateway / 6 {
					_, _, _ = g.Complete(t.Context(), completion(randomPrompt(r, 6), 8, r.IntN(2) == 0))
				}
			})
		}
	}
	wg.Wait()
	settle := p.WaitIdle(t, 30*time.Second)
	sampler.Stop(t)
	t.Logf("every worker back to 0 load %s after the last request", settle.Round(time.Millisecond))

	var want struct{ completed, errored, fallback, unanswered float64 }
	for _, g := range []*gw{retrying, single} {
		for _, r := range g.WaitRecords(t, perGateway) {
			switch {
			case len(r.Endpoints) == 0:
				t.Errorf("request not routed: %+v", r.Record)
				continue
			case r.Served == "":
				want.unanswered++ // every attempt failed to connect: no response reached the picker
			case r.Status == http.StatusOK:
				want.completed++
			default:
				want.errored++
			}
			if r.Served != "" && r.Served != r.Endpoints[0] {
				want.fallback++
			}
		}
	}
	for _, r := range retrying.Records() {
		if r.Status != http.StatusOK {
			t.Errorf("with retries over a list holding a healthy server, a request ended %d: endpoints %v, attempts %+v", r.Status, r.Endpoints, r.Attempts)
		}
	}
	rel := checkReleases(t, p)
	if rel["fallback"] != want.fallback || rel["completed"] != want.completed || rel["error"] != want.errored+want.unanswered {
		t.Errorf("releases %v, want fallback %v, completed %v, error %v (upstream errors) + %v (no upstream answered)",
			rel, want.fallback, want.completed, want.errored, want.unanswered)
	}
	if want.fallback == 0 || want.errored == 0 {
		t.Errorf("the faults did not exercise fallbacks (%v) and errors (%v)", want.fallback, want.errored)
	}
}
