package scrape

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/inferpick/inferpick/picker/registry"
)

// fakeClock is a clock.PassiveClock that moves only when told.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// modelServer is a loopback HTTP server whose /metrics answer can change.
type modelServer struct {
	*httptest.Server
	handler atomic.Pointer[http.HandlerFunc]
	release chan struct{} // closed when the test ends
}

func newModelServer(t testing.TB, h http.HandlerFunc) *modelServer {
	t.Helper()
	ms := &modelServer{release: make(chan struct{})}
	ms.set(h)
	ms.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		(*ms.handler.Load())(w, r)
	}))
	t.Cleanup(func() {
		close(ms.release)
		ms.Close()
	})
	return ms
}

func (ms *modelServer) set(h http.HandlerFunc) { ms.handler.Store(&h) }

func (ms *modelServer) addr() netip.AddrPort {
	return netip.MustParseAddrPort(ms.Listener.Addr().String())
}

// serve answers /metrics with body and anything else with 404.
func serve(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(body))
	}
}

// hang answers nothing until the test ends (or, when untilGone, until the
// client goes away), and tells arrived about each request that came in.
func (ms *modelServer) hang(arrived chan<- struct{}, untilGone bool) http.HandlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		var gone <-chan struct{}
		if untilGone {
			gone = r.Context().Done()
		}
		select {
		case <-ms.release:
		case <-gone:
		}
	}
}

// recv waits for a value on ch, failing the test after a generous deadline.
func recv[T any](t *testing.T, ch <-chan T, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func endpoint(uid string, addr netip.AddrPort) registry.Endpoint {
	return registry.Endpoint{
		Key:     registry.Key{UID: uid, Port: int32(addr.Port())},
		Name:    uid,
		Address: addr,
	}
}

// startScraper builds a Scraper listening to reg and runs it until the test
// ends. Workers already in reg are announced before Start runs.
func startScraper(t *testing.T, reg *registry.Registry, opts ...Option) (*Scraper, *prometheus.Registry) {
	t.Helper()
	metrics := prometheus.NewPedanticRegistry()
	s, err := New(metrics, append([]Option{WithInterval(10 * time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatalf("New() error = %v", err)
	}
	reg.AddListener(s)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-stopped; err != nil {
			t.Errorf("Start() error = %v", err)
		}
	})
	return s, metrics
}

// eventually polls cond until it holds, failing the test after a generous
// deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// sample returns the value of the series of name whose labels include
// want, and whether it exists.
func sampleOf(t *testing.T, g prometheus.Gatherer, name string, want map[string]string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("Gather() error = %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if hasLabels(m, want) {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok && v == l.GetValue() {
			found++
		}
	}
	return found == len(want)
}

func errorsOf(t *testing.T, g prometheus.Gatherer, addr netip.AddrPort, r reason) float64 {
	t.Helper()
	v, _ := sampleOf(t, g, "inferpick_scrape_errors_total", map[string]string{"address": addr.String(), "reason": r.String()})
	return v
}

func pollerOf(s *Scraper, w *registry.Worker) *poller {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pollers[w]
}

func pageWith(waiting, running int, kv float64) string {
	return vllmPage(pageSpec{models: []string{"m"}, waiting: waiting, running: running, kv: kv})
}

func describe(m *registry.Metrics) string {
	if m == nil {
		return "<nil>"
	}
	return fmt.Sprintf("%+v", *m)
}

// bases is an incomplete served list of base models, as metrics give it.
func bases(names ...string) *registry.Served { return &registry.Served{Bases: names} }
