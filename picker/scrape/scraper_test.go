package scrape

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

func TestScraperStoresMetrics(t *testing.T) {
	srv := newModelServer(t, serve(pageWith(3, 7, 0.25)))
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
	clock := newFakeClock()
	startScraper(t, reg, WithClock(clock))

	eventually(t, "metrics on the worker", func() bool { return w.Metrics() != nil })
	// The test server answers /v1/models with the metrics page too, so the
	// served models are the model_name values of the metrics.
	want := &registry.Metrics{Waiting: 3, Running: 7, KVUsage: 0.25, BlockSize: 16, NumGPUBlocks: 27911, Served: bases("m"),
		Counters: registry.Counters(v1Counters(1)), Engines: 1, Scraped: clock.Now()}
	if diff := cmp.Diff(want, w.Metrics()); diff != "" {
		t.Errorf("Metrics() (-want +got):\n%s", diff)
	}

	srv.set(serve(pageWith(9, 1, 0.5)))
	eventually(t, "new metrics", func() bool { return w.Metrics().Waiting == 9 })
}

func TestScraperAddsWorkersWhileRunning(t *testing.T) {
	reg := registry.New()
	startScraper(t, reg)
	srv := newModelServer(t, serve(pageWith(1, 2, 0.5)))
	w := registrytest.Upsert(reg, endpoint("late", srv.addr()))
	eventually(t, "metrics on a worker added after Start", func() bool { return w.Metrics() != nil })
}

func TestScraperStatusCarriesLoRA(t *testing.T) {
	page := pageWith(1, 1, 0.1) +
		`vllm:lora_requests_info{max_lora="2",running_lora_adapters="sql",waiting_lora_adapters="chat,sql"} 1.75e+09` + "\n"
	srv := newModelServer(t, serve(page))
	reg := registry.New()
	w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
	s, _ := startScraper(t, reg)

	eventually(t, "a good scrape", func() bool { st, _ := s.Status(w); return !st.Scraped.IsZero() })
	st, ok := s.Status(w)
	if !ok || st.Err != nil {
		t.Fatalf("Status() = %+v, %v; want a good scrape", st, ok)
	}
	want := &LoRAInfo{MaxLoRA: 2, Running: []string{"sql"}, Waiting: []string{"chat", "sql"}}
	if diff := cmp.Diff(want, st.Report.LoRA); diff != "" {
		t.Errorf("Status().Report.LoRA (-want +got):\n%s", diff)
	}
}

func TestScraperMetricsPortAndPath(t *testing.T) {
	srv := newModelServer(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/custom/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("vllm:num_requests_waiting 4\n"))
	})
	reg := registry.New()
	// The worker serves on a port nobody listens on; its metrics are on
	// the test server's port.
	serving := netip.AddrPortFrom(srv.addr().Addr(), 1)
	w := registrytest.Upsert(reg, endpoint("a", serving))
	startScraper(t, reg, WithMetricsPort(srv.addr().Port()), WithPath("/custom/metrics"))
	eventually(t, "metrics from the metrics port", func() bool {
		m := w.Metrics()
		return m != nil && m.Waiting == 4
	})
}

// The metrics port is for pools of one target port: each rank of a
// data-parallel pod (OwnMetrics) serves its own page and is scraped on its
// own port, as the upstream picker scrapes them, not the one page of the
// metrics port for every rank. A worker whose endpoint changes in this
// alone (its pool lost or gained target ports) stays, and is scraped at
// its new place from then on.
func TestScraperMetricsPortIsNotForDataParallelRanks(t *testing.T) {
	clients := map[string][]Option{
		"own connection": nil,
		"HTTP client":    {WithHTTPClient(&http.Client{})},
	}
	for name, opts := range clients {
		t.Run(name, func(t *testing.T) {
			shared := newModelServer(t, serve(pageWith(9, 0, 0)))
			rank0 := newModelServer(t, serve(pageWith(1, 0, 0)))
			rank1 := newModelServer(t, serve(pageWith(2, 0, 0)))
			own := func(ep registry.Endpoint) registry.Endpoint { ep.OwnMetrics = true; return ep }
			reg := registry.New()
			w0 := registrytest.Upsert(reg, own(endpoint("pod", rank0.addr())))
			w1 := registrytest.Upsert(reg, own(endpoint("pod", rank1.addr())))
			startScraper(t, reg, append(opts, WithMetricsPort(shared.addr().Port()))...)
			waiting := func(w *registry.Worker) int {
				if m := w.Metrics(); m != nil {
					return m.Waiting
				}
				return -1
			}
			eventually(t, "each rank's own page", func() bool { return waiting(w0) == 1 && waiting(w1) == 2 })

			// The pool is down to one target port: its worker reads the
			// metrics port.
			reg.Update([]registry.Endpoint{endpoint("pod", rank0.addr())}, []registry.Key{w1.Endpoint().Key})
			eventually(t, "the metrics port's page", func() bool { return waiting(w0) == 9 })

			// A second target port again: its own page.
			registrytest.Upsert(reg, own(endpoint("pod", rank0.addr())))
			eventually(t, "the rank's own page again", func() bool { return waiting(w0) == 1 })
			if got, _ := registrytest.Find(reg, w0.Endpoint().Key); got != w0 {
				t.Error("the worker was replaced when its pool's target ports changed")
			}
		})
	}
}

func TestScraperFailureKeepsOldValues(t *testing.T) {
	cases := map[string]struct {
		breakIt func(*modelServer)
		opts    []Option
		reason  reason
	}{
		"garbage body": {
			breakIt: func(ms *modelServer) { ms.set(serve("<html>oops</html>\n")) },
			reason:  reasonParse,
		},
		"server error": {
			breakIt: func(ms *modelServer) {
				ms.set(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "busy", http.StatusServiceUnavailable) })
			},
			reason: reasonStatus,
		},
		"body over the cap": {
			breakIt: func(ms *modelServer) { ms.set(serve("vllm:num_requests_waiting 1\n" + strings.Repeat("#\n", 4096))) },
			opts:    []Option{WithMaxBodySize(4096)},
			reason:  reasonTooLarge,
		},
		"server gone": {
			breakIt: func(ms *modelServer) { ms.Close() },
			reason:  reasonConnect,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			srv := newModelServer(t, serve("vllm:num_requests_waiting 5\nvllm:num_requests_running 6\n"))
			reg := registry.New()
			w := registrytest.Upsert(reg, endpoint("a", srv.addr()))
			s, metrics := startScraper(t, reg, tc.opts...)
			eventually(t, "a first good scrape", func() bool { return w.Metrics() != nil })

			tc.breakIt(srv)
			// Once two failures are counted, every later scrape fails too.
			eventually(t, "errors", func() bool { return errorsOf(t, metrics, srv.addr(), tc.reason) >= 2 })
			before := w.Metrics()
			n := errorsOf(t, metrics, srv.addr(), tc.reason)
			eventually(t, "more errors", func() bool { return errorsOf(t, metrics, srv.addr(), tc.reason) >= n+2 })

			if got := w.Metrics(); got != before || got.Waiting != 5 || got.Running != 6 {
				t.Errorf("Metrics() after failures = %s, want the last good scrape %s kept", describe(got), describe(before))
			}
			if st, _ := s.Status(w); st.Err == nil || st.Report.Waiting != 5 {
				t.Errorf("Status() = %+v, want the error and the last good report", st)
			}
		})
	}
}

func TestScraperHangingServerBlocksNothing(t *testing.T) {
	arrived := make(chan struct{}, 1)
	stuck := newModelServer(t, nil)
	stuck.set(stuck.hang(arrived, false))
	healthy := newModelServer(t, serve(pageWith(2, 3, 0.5)))
	reg := registry.New()
	stuckWorker := registrytest.Upsert(reg, endpoint("stuck", stuck.addr()))
	healthyWorker := registrytest.Upsert(reg, endpoint("healthy", healthy.addr()))
	clock := newFakeClock()
	s, metrics := startScraper(t, reg, WithInterval(20*time.Millisecond), WithClock(clock))

	eventually(t, "metrics of the healthy worker", func() bool { return healthyWorker.Metrics() != nil })
	eventually(t, "timeouts on the stuck worker", func() bool { return errorsOf(t, metrics, stuck.addr(), reasonTimeout) >= 1 })
	if m := stuckWorker.Metrics(); m != nil {
		t.Errorf("stuck worker Metrics() = %s, want none", describe(m))
	}

	clock.Advance(7 * time.Second)
	staleness, _ := sampleOf(t, metrics, "inferpick_scrape_staleness_seconds", map[string]string{"address": stuck.addr().String()})
	if staleness != 7 {
		t.Errorf("staleness of the stuck worker = %v, want 7 (never scraped since it was added)", staleness)
	}

	// Remove the stuck worker while a request to it is in flight.
	p := pollerOf(s, stuckWorker)
	select {
	case <-arrived:
	default:
	}
	recv(t, arrived, "a request to the stuck worker")
	removed := make(chan struct{})
	go func() {
		registrytest.Remove(reg, stuckWorker.Endpoint().Key)
		close(removed)
	}()
	recv(t, removed, "Remove of a worker with a hanging scrape to return")
	recv(t, p.done, "the stuck worker's poller to end after removal")
	if m := healthyWorker.Metrics(); m == nil || m.Waiting != 2 {
		t.Errorf("healthy worker Metrics() = %s, want its scrape", describe(m))
	}
}

// TestScraperSlowServerDelaysNoOther: the workers share one ticker, and a
// worker whose scrape hangs (well within its timeout) holds up no other
// worker's scrapes.
func TestScraperSlowServerDelaysNoOther(t *testing.T) {
	arrived := make(chan struct{}, 1)
	slow := newModelServer(t, nil)
	slow.set(slow.hang(arrived, true))
	healthy := newModelServer(t, serve(pageWith(1, 0, 0.5)))
	reg := registry.New()
	registrytest.Upsert(reg, endpoint("slow", slow.addr()))
	w := registrytest.Upsert(reg, endpoint("healthy", healthy.addr()))
	_, metrics := startScraper(t, reg, WithTimeout(time.Hour))

	recv(t, arrived, "a request to the slow worker")
	for waiting := 2; waiting <= 4; waiting++ {
		healthy.set(serve(pageWith(waiting, 0, 0.5)))
		eventually(t, fmt.Sprintf("the healthy worker scraped with %d waiting", waiting), func() bool {
			m := w.Metrics()
			return m != nil && m.Waiting == waiting
		})
	}
	if n := errorsOf(t, metrics, slow.addr(), reasonTimeout); n != 0 {
		t.Errorf("slow worker timeouts = %v, want its first scrape still in flight", n)
	}
}

func TestScraperRemoveDeletesSeries(t *testing.T) {
	a := newModelServer(t, serve(pageWith(1, 1, 0.1)))
	b := newModelServer(t, serve(pageWith(2, 2, 0.2)))
	reg := registry.New()
	wa := registrytest.Upsert(reg, endpoint("a", a.addr()))
	wb := registrytest.Upsert(reg, endpoint("b", b.addr()))
	s, metrics := startScraper(t, reg)
	eventually(t, "metrics", func() bool { return wa.Metrics() != nil && wb.Metrics() != nil })

	count := func(name string) int {
		n, err := testutil.GatherAndCount(metrics, name)
		if err != nil {
			t.Fatalf("GatherAndCount(%s) error = %v", name, err)
		}
		return n
	}
	if got := count("inferpick_scrape_staleness_seconds"); got != 2 {
		t.Fatalf("staleness series = %d, want 2", got)
	}
	p := pollerOf(s, wa)
	registrytest.Remove(reg, wa.Endpoint().Key)

	want := map[string]int{
		"inferpick_scrape_staleness_seconds":     1,
		"inferpick_scrape_malformed_lines_total": 1,
		"inferpick_scrape_errors_total":          int(numReasons),
	}
	for name, n := range want {
		if got := count(name); got != n {
			t.Errorf("%s series after removal = %d, want %d", name, got, n)
		}
	}
	if _, ok := sampleOf(t, metrics, "inferpick_scrape_staleness_seconds", map[string]string{"address": a.addr().String()}); ok {
		t.Errorf("removed worker %s still has a staleness series", a.addr())
	}
	if _, ok := s.Status(wa); ok {
		t.Error("Status() of a removed worker is still reported")
	}
	recv(t, p.done, "the removed worker's poller to end")
}

func TestScraperSameAddressTwice(t *testing.T) {
	srv := newModelServer(t, serve(pageWith(1, 1, 0.1)))
	reg := registry.New()
	old := registrytest.Upsert(reg, endpoint("old-pod", srv.addr()))
	cur := registrytest.Upsert(reg, endpoint("new-pod", srv.addr()))
	_, metrics := startScraper(t, reg)
	eventually(t, "metrics on both", func() bool { return old.Metrics() != nil && cur.Metrics() != nil })
	n, err := testutil.GatherAndCount(metrics, "inferpick_scrape_staleness_seconds")
	if err != nil || n != 1 {
		t.Errorf("GatherAndCount() = %d, %v; want one series for the shared address", n, err)
	}
}

func TestScraperStopLeaksNoGoroutines(t *testing.T) {
	var servers []*modelServer
	for range 3 {
		servers = append(servers, newModelServer(t, serve(pageWith(1, 2, 0.3))))
	}
	arrived := make(chan struct{}, 1)
	stuck := newModelServer(t, nil)
	stuck.set(stuck.hang(arrived, true))
	baseline := runtime.NumGoroutine()

	reg := registry.New()
	var workers []*registry.Worker
	for i, srv := range servers {
		workers = append(workers, registrytest.Upsert(reg, endpoint(string(rune('a'+i)), srv.addr())))
	}
	registrytest.Upsert(reg, endpoint("stuck", stuck.addr()))
	s, err := New(nil, WithInterval(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	reg.AddListener(s)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.Start(ctx) }()
	eventually(t, "metrics", func() bool {
		for _, w := range workers {
			if w.Metrics() == nil {
				return false
			}
		}
		return true
	})
	recv(t, arrived, "a request to the stuck worker")
	cancel()
	if err := <-stopped; err != nil {
		t.Fatalf("Start() error = %v", err)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("second Start() succeeded, want an error")
	}
	// Workers announced after the stop are not polled.
	late := registrytest.Upsert(reg, endpoint("late", servers[0].addr()))
	if _, ok := s.Status(late); ok {
		t.Error("a worker added after Stop is polled")
	}
	eventually(t, "goroutines back to the baseline", func() bool { return runtime.NumGoroutine() <= baseline })
}

func TestNewRejectsBadOptions(t *testing.T) {
	cases := map[string][]Option{
		"zero interval":     {WithInterval(0)},
		"negative timeout":  {WithTimeout(-time.Second)},
		"zero body cap":     {WithMaxBodySize(0)},
		"relative path":     {WithPath("metrics")},
		"negative interval": {WithInterval(-time.Millisecond)},
	}
	for name, opts := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := New(nil, opts...); err == nil {
				t.Error("New() succeeded, want an error")
			}
		})
	}
}

func TestDefaultTimeout(t *testing.T) {
	cases := map[string]struct {
		interval time.Duration
		want     time.Duration
	}{
		"short interval": {interval: 50 * time.Millisecond, want: 50 * time.Millisecond},
		"long interval":  {interval: 5 * time.Second, want: time.Second},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := New(nil, WithInterval(tc.interval))
			if err != nil {
				t.Fatal(err)
			}
			if s.opts.timeout != tc.want {
				t.Errorf("timeout = %v, want %v", s.opts.timeout, tc.want)
			}
		})
	}
}

// The metrics port replaces the serving port, but not for an endpoint that
// serves its own metrics (a rank of a pool with several target ports).
func TestMetricsURL(t *testing.T) {
	cases := map[string]struct {
		addr string
		own  bool
		port uint16
		want string
	}{
		"serving port":                      {addr: "10.0.0.1:8000", want: "http://10.0.0.1:8000/metrics"},
		"metrics port":                      {addr: "10.0.0.1:8000", port: 9090, want: "http://10.0.0.1:9090/metrics"},
		"ipv6":                              {addr: "[fd00::1]:8000", want: "http://[fd00::1]:8000/metrics"},
		"own metrics: not the metrics port": {addr: "10.0.0.1:8001", own: true, port: 9090, want: "http://10.0.0.1:8001/metrics"},
		"own metrics, no metrics port set":  {addr: "10.0.0.1:8001", own: true, want: "http://10.0.0.1:8001/metrics"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			ep := endpoint("a", netip.MustParseAddrPort(tc.addr))
			ep.OwnMetrics = tc.own
			if got := metricsURL(ep, tc.port, "/metrics"); got != tc.want {
				t.Errorf("metricsURL() = %q, want %q", got, tc.want)
			}
		})
	}
}
