package reliability

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// envInt reads a positive integer from the environment, else def.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// abortKind is where a storm request is abandoned by its client.
type abortKind int

const (
	finish         abortKind = iota // read to the end
	abortUpload                     // cancel while the body is still being sent (before routing)
	abortRandom                     // cancel after a random delay: routing, headers or stream
	abortMidStream                  // cancel after the first streamed bytes
	numAbortKinds
)

var abortNames = [numAbortKinds]string{"finish", "abort-upload", "abort-random", "abort-mid-stream"}

// TestAbortStorm sends a storm of streaming requests of which most are
// abandoned by their client at random points, one model server stalling
// its streams, and checks that no load count leaks or goes negative.
func TestAbortStorm(t *testing.T) {
	sims := []*sim{startSim(t, "127.0.0.41", 0), startSim(t, "127.0.0.42", 0), startSim(t, "127.0.0.43", 0)}
	// The third server stops every stream after 4 events and holds it open:
	// its clients give up while the upstream stalls.
	sims[2].SetFaults(t, map[string]any{"stall_after_chunks": 4})
	p := startPicker(t, "--static-endpoints", sims[0].addr+","+sims[1].addr+","+sims[2].addr)
	p.WaitWorkers(t, 3)
	g := startGateway(t, p.Addr())

	total := envInt("RELIABILITY_STORM_REQUESTS", 1000)
	const concurrency = 48
	sampler := sampleLoads(p)
	var (
		counts [numAbortKinds]atomic.Int64
		errs   atomic.Int64
		wg     sync.WaitGroup
		next   atomic.Int64
	)
	start := time.Now()
	for w := range concurrency {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for next.Add(1) <= int64(total) {
				kind := stormKind(r)
				counts[kind].Add(1)
				if err := stormRequest(t.Context(), g, r, kind); err != nil {
					errs.Add(1)
					t.Logf("%s request: %v", abortNames[kind], err)
				}
			}
		})
	}
	wg.Wait()
	lastAbort := time.Now()
	settle := p.WaitIdle(t, 60*time.Second)
	sampler.Stop(t)
	for k := range numAbortKinds {
		t.Logf("%-16s %d", abortNames[k], counts[k].Load())
	}
	t.Logf("storm of %d requests took %s; every worker back to 0 load %s after the last abort",
		total, lastAbort.Sub(start).Round(time.Millisecond), settle.Round(time.Millisecond))
	if n := errs.Load(); n > 0 {
		t.Errorf("%d requests meant to finish did not", n)
	}

	// The servers agree: nothing runs or waits once the picker counts 0.
	eventually(t, 30*time.Second, func() error {
		for _, s := range sims {
			st, err := s.Stats()
			if err != nil {
				return err
			}
			if st.Running != 0 || st.Waiting != 0 {
				return fmt.Errorf("%s still runs %d and queues %d", s.addr, st.Running, st.Waiting)
			}
		}
		return nil
	})
	checkReleases(t, p)

	// A quiet point with work in flight: the picker's per-worker count is
	// what each server reports running or waiting.
	sims[2].SetFaults(t, map[string]any{"stall_after_chunks": -1})
	ctx, cancel := context.WithCancel(t.Context())
	longs := openLongStreams(ctx, g, 6, 8, 99)
	eventually(t, 30*time.Second, func() error { return agree(p, sims, 6) })
	cancel()
	longs.Wait()
	p.WaitIdle(t, 30*time.Second)
	eventually(t, 30*time.Second, func() error { return agree(p, sims, 0) })
}

func stormKind(r *rand.Rand) abortKind {
	switch n := r.IntN(100); {
	case n < 35:
		return finish
	case n < 50:
		return abortUpload
	case n < 75:
		return abortRandom
	default:
		return abortMidStream
	}
}

// stormRequest sends one streaming request and abandons it as kind says.
// It returns an error only when a request meant to finish did not get a
// complete answer from a server that does not stall.
func stormRequest(parent context.Context, g *gw, r *rand.Rand, kind abortKind) error {
	ctx, cancel := context.WithTimeout(parent, 2*time.Second)
	defer cancel()
	body := completion(randomPrompt(r, 4+r.IntN(20)), 8+r.IntN(40), true)
	switch kind {
	case abortUpload:
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(body[:len(body)/2])
			cancel()
			_ = pw.CloseWithError(context.Canceled)
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/v1/completions", pr)
		if resp, err := g.client.Do(req); err == nil {
			resp.Body.Close()
		}
		return nil
	case abortRandom:
		delay := time.Duration(r.IntN(60)) * time.Millisecond
		go func() {
			select {
			case <-time.After(delay):
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	resp, err := g.Post(ctx, "/v1/completions", body, nil)
	if err != nil {
		return nil // abandoned before the answer, on purpose or by the stall deadline
	}
	defer resp.Body.Close()
	if kind == abortMidStream {
		buf := make([]byte, 1+r.IntN(200))
		_, _ = io.ReadAtLeast(resp.Body, buf, 1)
		cancel()
		return nil
	}
	b, err := io.ReadAll(resp.Body)
	if kind != finish || ctx.Err() != nil {
		return nil // abandoned, or held by the stalling server until the deadline
	}
	if err != nil {
		return fmt.Errorf("status %d, read body: %w", resp.StatusCode, err)
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), "[DONE]") {
		return fmt.Errorf("status %d, body %.200q", resp.StatusCode, b)
	}
	return nil
}

// agree checks that the picker counts want requests in all and, per
// worker, as many as its server is running or queueing.
func agree(p *picker, sims []*sim, want int) error {
	v, err := p.Workers()
	if err != nil {
		return err
	}
	loads := map[string]int64{}
	var sum int64
	for i := range v.Workers {
		w := &v.Workers[i]
		loads[w.Address] = w.Load
		sum += w.Load
	}
	if sum != int64(want) {
		return fmt.Errorf("picker counts %d requests, want %d", sum, want)
	}
	for _, s := range sims {
		st, err := s.Stats()
		if err != nil {
			return err
		}
		if int64(st.Running+st.Waiting) != loads[s.addr] {
			return fmt.Errorf("%s runs %d and queues %d, the picker counts %d", s.addr, st.Running, st.Waiting, loads[s.addr])
		}
	}
	return nil
}

// checkReleases checks that every routed request was released exactly once:
// the releases other than fallbacks add up to the requests routed, and no
// handler panicked.
func checkReleases(t *testing.T, p *picker) map[string]float64 {
	t.Helper()
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	rel := releases(pp)
	routed := pp.Sum("inferpick_requests_total", "code", "200")
	ended := rel["completed"] + rel["cancelled"] + rel["error"] + rel["panic"] + rel["protocol_violation"]
	t.Logf("routed %v; releases %v", routed, rel)
	if ended != routed {
		t.Errorf("%v requests routed but %v guards ended (%v)", routed, ended, rel)
	}
	if rel["panic"] != 0 {
		t.Errorf("%v handlers panicked", rel["panic"])
	}
	return rel
}
