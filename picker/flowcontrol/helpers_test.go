package flowcontrol

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	testingclock "k8s.io/utils/clock/testing"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// gate stands in for the pool: try succeeds while free > 0 and records the
// order of dispatches.
type gate struct {
	mu    sync.Mutex
	free  int
	order []string
	tries int
}

func (g *gate) try(name string) TryFunc {
	return func() (bool, error) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.tries++
		if g.free == 0 {
			return false, nil
		}
		g.free--
		g.order = append(g.order, name)
		return true, nil
	}
}

func (g *gate) open(n int) {
	g.mu.Lock()
	g.free += n
	g.mu.Unlock()
}

// waitTries waits until g has been tried n times in all.
func (g *gate) waitTries(n int) {
	for {
		g.mu.Lock()
		tries := g.tries
		g.mu.Unlock()
		if tries >= n {
			return
		}
		runtime.Gosched()
	}
}

func (g *gate) triesSoFar() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.tries
}

func (g *gate) dispatched() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.order...)
}

type harness struct {
	q     *Queue
	clock *testingclock.FakeClock
	reg   *prometheus.Registry
	gate  *gate
	wg    sync.WaitGroup
	mu    sync.Mutex
	errs  map[string]error
}

func newHarness(t *testing.T, opts Options, o ...Option) *harness {
	t.Helper()
	h := &harness{
		clock: testingclock.NewFakeClock(epoch),
		reg:   prometheus.NewPedanticRegistry(),
		gate:  &gate{},
		errs:  map[string]error{},
	}
	q, err := New(opts, append([]Option{WithClock(h.clock), WithRegisterer(h.reg, "pool")}, o...)...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.q = q
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		h.wg.Wait()
	})
	return h
}

// admit starts a request in its own goroutine and waits until it is queued.
func (h *harness) admit(ctx context.Context, name string, it Item) {
	want := h.q.Len() + 1
	h.admitAsync(ctx, name, it)
	h.waitLen(want)
}

func (h *harness) admitAsync(ctx context.Context, name string, it Item) {
	h.admitThrough(ctx, name, it, h.gate)
}

// admitThrough is admitAsync for a request whose capacity is g's.
func (h *harness) admitThrough(ctx context.Context, name string, it Item, g *gate) {
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		err := h.q.Admit(ctx, it, g.try(name))
		h.mu.Lock()
		h.errs[name] = err
		h.mu.Unlock()
	}()
}

func (h *harness) waitLen(n int) {
	for h.q.Len() != n {
		runtime.Gosched()
	}
}

// result waits for the named request's outcome.
func (h *harness) result(name string) error {
	_, err := h.first(name)
	return err
}

// first waits until one of the named requests has an outcome, and returns
// which one and its outcome.
func (h *harness) first(names ...string) (string, error) {
	for {
		h.mu.Lock()
		for _, n := range names {
			if err, ok := h.errs[n]; ok {
				h.mu.Unlock()
				return n, err
			}
		}
		h.mu.Unlock()
		runtime.Gosched()
	}
}

// gaugeSum adds up every series of the named gauge family.
func (h *harness) gaugeSum(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue()
		}
	}
	return sum
}

var gaugeNames = []string{
	"inferpick_flowcontrol_queue_length",
	"inferpick_flowcontrol_queue_bytes",
	"inference_extension_flow_control_queue_size",
	"inference_extension_flow_control_queue_bytes",
}

// seriesCount counts the series of the named family.
func (h *harness) seriesCount(t *testing.T, name string) int {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// samples counts the observations (histograms) or the value (counters) of
// the named family's series whose labels include want.
func (h *harness) samples(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue series
				}
			}
			sum += float64(m.GetHistogram().GetSampleCount()) + m.GetCounter().GetValue()
		}
	}
	return sum
}

// family returns the named family's series: each one's labels, and its
// value (gauges) or its observations (histograms).
func (h *harness) family(t *testing.T, name string) map[string]float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			got[strings.Join(labels, ",")] = m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return got
}

// buckets returns the upper bounds of the named histogram's buckets.
func (h *harness) buckets(t *testing.T, name string) []float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			var bounds []float64
			for _, b := range mf.GetMetric()[0].GetHistogram().GetBucket() {
				bounds = append(bounds, b.GetUpperBound())
			}
			return bounds
		}
	}
	return nil
}
