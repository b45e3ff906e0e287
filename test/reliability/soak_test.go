package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/framework"
)

// soakSample is one row of the soak report.
type soakSample struct {
	at         time.Duration
	rssKiB     int64
	heapInuse  float64
	goroutines float64
	requests   int64
}

// TestSoak runs sustained traffic with aborts, model-server restarts and
// fault flips for RELIABILITY_SOAK (default 40s), then checks that the
// picker's goroutines and heap come back near the baseline taken after a
// warm-up, and that no count leaked. It logs RSS, heap and goroutines over
// time; RELIABILITY_SOAK_REPORT names a file to write that table to.
func TestSoak(t *testing.T) {
	duration := 40 * time.Second
	if d, err := time.ParseDuration(os.Getenv("RELIABILITY_SOAK")); err == nil && d > 0 {
		duration = d
	}
	hosts := []string{"127.0.0.41", "127.0.0.42", "127.0.0.43"}
	port := framework.FreePortT(t, hosts...)
	sims := make([]*sim, len(hosts))
	addrs := make([]string, len(hosts))
	for i, h := range hosts {
		sims[i] = startSim(t, h, port)
		addrs[i] = sims[i].addr
	}
	p := startPicker(t, "--static-endpoints", strings.Join(addrs, ","))
	p.WaitWorkers(t, len(hosts))
	g := startGateway(t, p.Addr())

	var sent atomic.Int64
	traffic := func(d time.Duration) {
		deadline := time.Now().Add(d)
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
				for time.Now().Before(deadline) {
					_ = stormRequest(t.Context(), g, r, stormKind(r))
					sent.Add(1)
				}
			})
		}
		wg.Wait()
	}

	start := time.Now()
	var rows []soakSample
	sample := func() soakSample {
		pp, err := p.Metrics()
		if err != nil {
			t.Fatal(err)
		}
		s := soakSample{at: time.Since(start), rssKiB: rssKiB(t, p.Pid()),
			heapInuse: pp.Sum("go_memstats_heap_inuse_bytes"), goroutines: pp.Sum("go_goroutines"), requests: sent.Load()}
		rows = append(rows, s)
		return s
	}

	// Warm up, settle, and take the baseline.
	traffic(5 * time.Second)
	p.WaitIdle(t, 30*time.Second)
	base := sample()

	// The soak: traffic, and every few seconds a model server restarts or
	// flips its faults, while a sampler records the picker's footprint.
	stop := make(chan struct{})
	var chaos sync.WaitGroup
	chaos.Go(func() {
		tick := time.NewTicker(3 * time.Second)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			s := sims[i%len(sims)]
			switch i % 3 {
			case 0:
				s.Stop(t)
				sims[i%len(sims)] = startSim(t, s.host, port)
			case 1:
				s.SetFaults(t, map[string]any{"error_rate": 0.3, "error_status": 503})
			case 2:
				s.SetFaults(t, map[string]any{"error_rate": 0, "stall_after_chunks": -1})
			}
		}
	})
	chaos.Go(func() {
		tick := time.NewTicker(max(duration/20, 2*time.Second))
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				sample()
			}
		}
	})
	traffic(duration)
	close(stop)
	chaos.Wait()

	settle := p.WaitIdle(t, 60*time.Second)
	var end soakSample
	// Idle connections and finished streams take a moment to wind down.
	waited := eventually(t, 30*time.Second, func() error {
		end = sample()
		if end.goroutines > base.goroutines+5 {
			return fmt.Errorf("picker goroutines %v, baseline %v", end.goroutines, base.goroutines)
		}
		return nil
	})
	report := soakReport(rows, base, end)
	t.Logf("soak of %s: %d requests; loads back to 0 %s after the traffic, goroutines back %s later\n%s",
		duration, sent.Load(), settle.Round(time.Millisecond), waited.Round(time.Millisecond), report)
	if path := os.Getenv("RELIABILITY_SOAK_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
			t.Error(err)
		}
	}
	if limit := base.heapInuse + max(base.heapInuse, 16<<20); end.heapInuse > limit {
		t.Errorf("heap in use %.1f MiB after the soak, baseline %.1f MiB", end.heapInuse/(1<<20), base.heapInuse/(1<<20))
	}
	checkReleases(t, p)
}

// rssKiB reads VmRSS of pid from /proc.
func rssKiB(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return n
		}
	}
	return 0
}

// soakReport renders the samples as a Markdown table.
func soakReport(rows []soakSample, base, end soakSample) string {
	var b strings.Builder
	b.WriteString("| time | requests sent | RSS (MiB) | heap in use (MiB) | goroutines |\n|---:|---:|---:|---:|---:|\n")
	for _, r := range rows {
		label := r.at.Round(time.Second).String()
		switch r {
		case base:
			label += " (baseline)"
		case end:
			label += " (end, idle)"
		}
		fmt.Fprintf(&b, "| %s | %d | %.1f | %.1f | %.0f |\n", label, r.requests, float64(r.rssKiB)/1024, r.heapInuse/(1<<20), r.goroutines)
	}
	return b.String()
}
