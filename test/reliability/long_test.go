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

	"github.com/inferpick/inferpick/test/gateway"
)

// TestLongRequestsStayCounted pins four long streams to one server and
// checks that they stay counted for their whole life (nothing resets a
// count) while new requests are balanced over the other servers.
func TestLongRequestsStayCounted(t *testing.T) {
	busy, b, c := startSim(t, "127.0.0.47", 0), startSim(t, "127.0.0.48", 0), startSim(t, "127.0.0.49", 0)
	p := startPicker(t, "--static-endpoints", busy.addr+","+b.addr+","+c.addr)
	p.WaitWorkers(t, 3)
	g := startGateway(t, p.Addr())

	// 2 ms a token: 4000 tokens are 8 s of streaming on an idle machine.
	longTokens := envInt("RELIABILITY_LONG_TOKENS", 4000)
	const longs = 4
	var wg sync.WaitGroup
	results := make(chan error, longs)
	r := rand.New(rand.NewPCG(4, 4))
	for range longs {
		body := completion(randomPrompt(r, 8), longTokens, true)
		wg.Go(func() {
			resp, err := g.Post(t.Context(), "/v1/completions", body, http.Header{gateway.SubsetHintHeader: {busy.addr}})
			if err != nil {
				results <- err
				return
			}
			defer resp.Body.Close()
			out, err := io.ReadAll(resp.Body)
			if err == nil && (resp.StatusCode != http.StatusOK || !strings.Contains(string(out), "[DONE]")) {
				err = fmt.Errorf("status %d, body ends %q", resp.StatusCode, out[max(0, len(out)-80):])
			}
			results <- err
		})
	}
	eventually(t, 30*time.Second, func() error { return loadOf(p, busy.addr, longs) })

	// While they run: sample the busy worker's count and route short
	// requests, which must all go elsewhere.
	window := time.Now().Add(3 * time.Second)
	used := map[string]int{}
	var samples []int64
	for i := 0; i < 30 || time.Now().Before(window); i++ {
		if i < 30 {
			if code, _, err := g.Complete(t.Context(), completion(randomPrompt(r, 6), 8, true)); err != nil || code != http.StatusOK {
				t.Fatalf("short request: %d %v", code, err)
			}
		}
		v, err := p.Workers()
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.Workers {
			w := &v.Workers[i]
			if w.Address == busy.addr {
				samples = append(samples, w.Load)
			}
		}
	}
	// The streams were still running after the last sample, so every
	// sample must have counted all of them.
	st, err := busy.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.Running != longs {
		t.Fatalf("the long streams ended before the observation window did (running %d): raise RELIABILITY_LONG_TOKENS", st.Running)
	}
	for i, n := range samples {
		if n != longs {
			t.Errorf("sample %d of the busy worker's load is %d, want %d", i, n, longs)
		}
	}
	for _, rec := range g.Records() {
		if len(rec.Endpoints) > 0 && rec.Endpoints[0] != busy.addr {
			used[rec.Endpoints[0]]++
		} else if len(rec.Endpoints) > 0 {
			used[busy.addr]++
		}
	}
	t.Logf("%d samples of the busy worker; short requests went to %v", len(samples), used)
	if used[busy.addr] != 0 {
		t.Errorf("%d short requests went to the worker busy with the long streams", used[busy.addr])
	}
	if used[b.addr] == 0 || used[c.addr] == 0 {
		t.Errorf("short requests were not balanced over the idle workers: %v", used)
	}

	wg.Wait()
	close(results)
	for err := range results {
		if err != nil {
			t.Errorf("long request: %v", err)
		}
	}
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

// loadOf checks that the worker at addr counts want requests.
func loadOf(p *picker, addr string, want int64) error {
	w, err := p.Worker(addr)
	if err != nil {
		return err
	}
	if w.Load != want {
		return fmt.Errorf("worker %s counts %d, want %d", addr, w.Load, want)
	}
	return nil
}
