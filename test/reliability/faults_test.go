package reliability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// TestModelServerMetricsFaults routes over a server whose /metrics hangs
// and one whose /metrics is garbage: routing goes on, every request is
// served, and the scraper does not pile up goroutines on the hanging one.
func TestModelServerMetricsFaults(t *testing.T) {
	hanging := startSim(t, "127.0.0.56", 0, "--fault-metrics-delay-ms", "600000")
	garbage := startSim(t, "127.0.0.57", 0, "--fault-metrics-garbage")
	fine := startSim(t, "127.0.0.58", 0)
	p := startPicker(t, "--static-endpoints", hanging.addr+","+garbage.addr+","+fine.addr,
		"--refresh-metrics-interval", "50ms")
	p.WaitWorkers(t, 3)
	g := startGateway(t, p.Addr())
	before := goroutines(t, p)

	r := rand.New(rand.NewPCG(5, 5))
	const n = 60
	for i := range n {
		code, body, err := g.Complete(t.Context(), completion(randomPrompt(r, 6), 4, i%2 == 0))
		if err != nil || code != http.StatusOK {
			t.Fatalf("request %d: status %d, %v: %s", i, code, err, body)
		}
	}
	served := map[string]int{}
	for _, rec := range g.Records() {
		served[rec.Served]++
	}
	v, err := p.Workers()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range v.Workers {
		var age any = "never scraped"
		if w.MetricsAgeMS != nil {
			age = time.Duration(*w.MetricsAgeMS) * time.Millisecond
		}
		t.Logf("%s served %d requests; metrics age %v", w.Address, served[w.Address], age)
	}
	after := goroutines(t, p)
	t.Logf("picker goroutines: %v before the requests, %v after", before, after)
	if after > before+20 {
		t.Errorf("picker goroutines grew from %v to %v while one /metrics hangs", before, after)
	}
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
}

func goroutines(t *testing.T, p *picker) float64 {
	t.Helper()
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	return pp.Sum("go_goroutines")
}

// TestPickerRestart kills the picker with streams in flight. While it is
// down the gateways apply their failure mode (FailClose refuses, FailOpen
// goes to the default upstream); the restarted picker starts from honest
// zero counts and routes again.
func TestPickerRestart(t *testing.T) {
	a, b := startSim(t, "127.0.0.59", 0), startSim(t, "127.0.0.60", 0)
	p := startPicker(t, "--static-endpoints", a.addr+","+b.addr)
	p.WaitWorkers(t, 2)
	closed := startGateway(t, p.Addr())
	open := startGateway(t, p.Addr(), gateway.WithFailureMode(gateway.FailOpen), gateway.WithDefaultUpstream(a.addr))

	// Streams in flight when the picker dies.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	inflight := openLongStreams(ctx, closed, 4, 6, 6)
	eventually(t, 30*time.Second, func() error { return agree(p, []*sim{a, b}, 4) })
	p.Kill()
	inflight.Wait() // the gateway cuts the streams whose processor went away

	code, _, err := closed.Complete(t.Context(), completion("while down", 2, false))
	if err != nil || code/100 != 5 {
		t.Errorf("FailClose while the picker is down: status %d, %v; want 5xx", code, err)
	}
	code, _, err = open.Complete(t.Context(), completion("while down", 2, false))
	if err != nil || code != http.StatusOK {
		t.Errorf("FailOpen while the picker is down: status %d, %v; want 200 from the default upstream", code, err)
	}
	if recs := open.WaitRecords(t, 1); !recs[0].FailedOpen || recs[0].Served != a.addr {
		t.Errorf("FailOpen record: %+v", recs[0].Record)
	}

	p.Restart(t, false)
	v := p.WaitWorkers(t, 2)
	for _, w := range v.Workers {
		if w.Load != 0 {
			t.Errorf("restarted picker counts %d on %s", w.Load, w.Address)
		}
	}
	pp, err := p.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	if n := pp.Sum("inferpick_requests_total") + pp.Sum("inferpick_guard_releases_total"); n != 0 {
		t.Errorf("restarted picker's request and release counters sum to %v, want 0", n)
	}
	// The gateway's connection comes back and routing resumes.
	r := rand.New(rand.NewPCG(6, 7))
	eventually(t, 30*time.Second, func() error {
		code, body, err := closed.Complete(t.Context(), completion(randomPrompt(r, 4), 2, true))
		if err != nil {
			return fmt.Errorf("complete: %w", err)
		}
		if code != http.StatusOK {
			return fmt.Errorf("status %d: %s", code, body)
		}
		return nil
	})
	p.WaitIdle(t, 30*time.Second)
	checkReleases(t, p)
	eventually(t, 30*time.Second, func() error { return agree(p, []*sim{a, b}, 0) })
}
