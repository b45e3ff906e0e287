package flowcontrol

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"
)

func TestAdmitFastPath(t *testing.T) {
	h := newHarness(t, Options{})
	h.gate.open(1)
	if err := h.q.Admit(t.Context(), Item{Priority: -1}, h.gate.try("now")); err != nil {
		t.Fatalf("Admit: %v", err)
	}
	if diff := cmp.Diff([]string{"now"}, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatched (-want +got):\n%s", diff)
	}
	if got := h.q.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
}

// A request is tried at once, and a sheddable one is not shed, while the
// requests that wait could not go where it goes (another model); a request
// that could, of the same or a higher priority, goes first, so one of
// negative priority is then shed without a try.
func TestAdmitAtOnceUnlessARequestForItsEndpointsWaits(t *testing.T) {
	cases := map[string]struct {
		waiting Item
		next    Item
		wantErr error
	}{
		"another model's backlog": {
			waiting: Item{Endpoints: "model-a"},
			next:    Item{Priority: -1, Endpoints: "model-b"},
		},
		"another model's backlog, of a higher priority": {
			waiting: Item{Priority: 10, Endpoints: "model-a"},
			next:    Item{Priority: -1, Endpoints: "model-b\x00" + "10.0.0.1:8000"},
		},
		"the same model's, of a lower priority": {
			waiting: Item{Endpoints: "model-a"},
			next:    Item{Priority: 5, Endpoints: "model-a"},
		},
		"the same model's": {
			waiting: Item{Endpoints: "model-a"},
			next:    Item{Priority: -1, Endpoints: "model-a"},
			wantErr: ErrShed,
		},
		"the same model's, under a subset hint": {
			waiting: Item{Endpoints: "model-a\x00" + "10.0.0.1:8000"},
			next:    Item{Priority: -1, Endpoints: "model-a"},
			wantErr: ErrShed,
		},
		"a request for any endpoints": {
			waiting: Item{},
			next:    Item{Priority: -1, Endpoints: "model-b"},
			wantErr: ErrShed,
		},
		"another model's, for a request for any endpoints": {
			waiting: Item{Endpoints: "model-a"},
			next:    Item{Priority: -1},
			wantErr: ErrShed,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, Options{})
			busy, next := &gate{}, &gate{}
			h.admitThrough(t.Context(), "waiting", tc.waiting, busy)
			h.waitLen(1)
			next.open(1)
			err := h.q.Admit(t.Context(), tc.next, next.try("next"))
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Admit = %v, want %v", err, tc.wantErr)
			}
			want := []string{"next"}
			if tc.wantErr != nil {
				want = nil
			}
			if diff := cmp.Diff(want, next.dispatched()); diff != "" {
				t.Errorf("dispatched (-want +got):\n%s", diff)
			}
			if n := next.triesSoFar(); tc.wantErr != nil && n != 0 {
				t.Errorf("tried %d times ahead of a waiting request for its endpoints, want never", n)
			}
		})
	}
}

// A request is not tried ahead of a waiting request of a higher priority
// for the same model, even when it would find room.
func TestAdmitDoesNotPassAWaitingRequestOfHigherPriority(t *testing.T) {
	h := newHarness(t, Options{})
	h.admit(t.Context(), "high", Item{Priority: 10, Endpoints: "model-a"})
	h.gate.open(1)
	h.admitAsync(t.Context(), "low", Item{Endpoints: "model-a"})
	if err := h.result("high"); err != nil {
		t.Fatalf("high: %v", err)
	}
	h.waitLen(1)
	h.gate.open(1)
	h.q.Notify()
	if err := h.result("low"); err != nil {
		t.Fatalf("low: %v", err)
	}
	if diff := cmp.Diff([]string{"high", "low"}, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatch order (-want +got):\n%s", diff)
	}
}

func TestAdmitTryError(t *testing.T) {
	h := newHarness(t, Options{})
	boom := errors.New("no candidate")
	err := h.q.Admit(t.Context(), Item{}, func() (bool, error) { return false, boom })
	if !errors.Is(err, boom) {
		t.Errorf("Admit = %v, want %v", err, boom)
	}
}

func TestDispatchOrder(t *testing.T) {
	type req = namedItem
	cases := map[string]struct {
		reqs []req
		want []string
	}{
		"higher priority first": {
			reqs: []req{
				{"low", Item{Priority: 0}},
				{"high", Item{Priority: 10}},
				{"mid", Item{Priority: 5}},
			},
			want: []string{"high", "mid", "low"},
		},
		"first come first served within a flow": {
			reqs: []req{
				{"a1", Item{FlowID: "a"}},
				{"a2", Item{FlowID: "a"}},
				{"a3", Item{FlowID: "a"}},
			},
			want: []string{"a1", "a2", "a3"},
		},
		"flows of a band take turns": {
			reqs: []req{
				{"a1", Item{FlowID: "a"}},
				{"a2", Item{FlowID: "a"}},
				{"a3", Item{FlowID: "a"}},
				{"b1", Item{FlowID: "b"}},
				{"c1", Item{FlowID: "c"}},
				{"b2", Item{FlowID: "b"}},
			},
			want: []string{"a1", "b1", "c1", "a2", "b2", "a3"},
		},
		"bands are strict, flows fair inside each": {
			reqs: []req{
				{"a1", Item{FlowID: "a"}},
				{"a2", Item{FlowID: "a"}},
				{"b1", Item{FlowID: "b"}},
				{"x1", Item{FlowID: "x", Priority: 1}},
				{"x2", Item{FlowID: "x", Priority: 1}},
				{"y1", Item{FlowID: "y", Priority: 1}},
			},
			want: []string{"x1", "y1", "x2", "a1", "b1", "a2"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { checkDispatchOrder(t, Options{}, tc.reqs, tc.want) })
	}
}

// namedItem is a request admitted under a name, to tell the order it is
// dispatched in.
type namedItem struct {
	name string
	item Item
}

// checkDispatchOrder admits reqs in turn to a queue of opts that has no
// room, then makes room for all, and checks the order they are
// dispatched in.
func checkDispatchOrder(t *testing.T, opts Options, reqs []namedItem, want []string) {
	t.Helper()
	h := newHarness(t, opts)
	for _, r := range reqs {
		h.admit(t.Context(), r.name, r.item)
	}
	h.gate.open(len(reqs))
	h.q.Notify()
	for _, r := range reqs {
		if err := h.result(r.name); err != nil {
			t.Errorf("%s: Admit = %v", r.name, err)
		}
	}
	if diff := cmp.Diff(want, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatch order (-want +got):\n%s", diff)
	}
}

func TestDispatchStopsAtNoCapacity(t *testing.T) {
	h := newHarness(t, Options{})
	for _, n := range []string{"r1", "r2", "r3"} {
		h.admit(t.Context(), n, Item{})
	}
	h.gate.open(1)
	h.q.Notify()
	if err := h.result("r1"); err != nil {
		t.Fatalf("r1: %v", err)
	}
	h.waitLen(2)
	h.gate.open(2)
	h.q.Notify()
	for _, n := range []string{"r2", "r3"} {
		if err := h.result(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if diff := cmp.Diff([]string{"r1", "r2", "r3"}, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatch order (-want +got):\n%s", diff)
	}
}

// Requests for endpoints that are full (a model whose pods are all busy)
// do not hold back those for other endpoints, whatever their places in the
// queue: a dispatch goes on past them, and they keep their places.
func TestDispatchGoesPastRequestsWhoseEndpointsAreFull(t *testing.T) {
	h := newHarness(t, Options{})
	a, b := &gate{}, &gate{}
	for _, r := range []struct {
		name string
		item Item
		g    *gate
	}{
		{"a1", Item{Endpoints: "a", Priority: 5}, a},
		{"a2", Item{Endpoints: "a"}, a},
		{"b1", Item{Endpoints: "b"}, b},
		{"a3", Item{Endpoints: "a"}, a},
		{"b2", Item{Endpoints: "b"}, b},
	} {
		want := h.q.Len() + 1
		h.admitThrough(t.Context(), r.name, r.item, r.g)
		h.waitLen(want)
	}
	b.open(2)
	h.q.Notify()
	for _, n := range []string{"b1", "b2"} {
		if err := h.result(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if diff := cmp.Diff([]string{"b1", "b2"}, b.dispatched()); diff != "" {
		t.Errorf("requests for endpoints with room, behind ones for full endpoints (-want +got):\n%s", diff)
	}
	if h.q.Len() != 3 || len(a.dispatched()) != 0 {
		t.Fatalf("%d waiting, %v dispatched for the full endpoints; want the 3 still waiting", h.q.Len(), a.dispatched())
	}
	a.open(3)
	h.q.Notify()
	for _, n := range []string{"a1", "a2", "a3"} {
		if err := h.result(n); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	if diff := cmp.Diff([]string{"a1", "a2", "a3"}, a.dispatched()); diff != "" {
		t.Errorf("the passed-over requests' order (-want +got):\n%s", diff)
	}
}

// A request whose endpoints have room is dispatched however many endpoint
// sets that are full wait ahead of it (the LoRA adapters of a busy base
// model, each its own set): two dispatch rounds after capacity freed for
// it, it has been tried and dispatched.
func TestRequestBehindManyFullEndpointSetsIsDispatched(t *testing.T) {
	for _, sets := range []int{maxFullPerRound, 3 * maxFullPerRound} {
		t.Run(fmt.Sprint(sets, " full sets"), func(t *testing.T) {
			h := newHarness(t, Options{})
			full, idle := &gate{}, &gate{}
			for i := range sets {
				name := fmt.Sprint("adapter-", i)
				want := h.q.Len() + 1
				h.admitThrough(t.Context(), name, Item{Endpoints: name}, full)
				h.waitLen(want)
			}
			want := h.q.Len() + 1
			h.admitThrough(t.Context(), "other", Item{Endpoints: "other"}, idle)
			h.waitLen(want)

			idle.open(1)
			// Every round tries the maxFullPerRound full sets at the head,
			// and a sweep through the queue takes at most 2*sets+48 tries of
			// them: once they have been tried 4*sets+112 times more, a sweep
			// that began after the gate opened has passed every waiter.
			rounds := (4*sets+112)/maxFullPerRound + 1
			start := full.triesSoFar()
			for r := 1; r <= rounds && len(idle.dispatched()) == 0; r++ {
				h.q.Notify()
				full.waitTries(start + r*maxFullPerRound)
			}
			if got := idle.dispatched(); len(got) != 1 {
				t.Fatalf("request for endpoints with room, behind %d full sets: dispatched %v after %d rounds; want it dispatched", sets, got, rounds)
			}
			if err := h.result("other"); err != nil {
				t.Errorf("other: %v", err)
			}
			if n := h.q.Len(); n != sets {
				t.Errorf("%d waiting, want the %d for full endpoints to keep waiting", n, sets)
			}
		})
	}
}

// A request whose endpoints have room is dispatched however many waiters
// for full endpoints are ahead of it, past what one round looks at.
func TestRequestBehindALongQueueForFullEndpointsIsDispatched(t *testing.T) {
	n := scanLimit + scanLimit/2
	h := newHarness(t, Options{MaxLen: 2 * n, MaxBandLen: 2 * n})
	full, idle := &gate{}, &gate{}
	for i := range n {
		h.admitThrough(t.Context(), fmt.Sprint("busy-", i), Item{Endpoints: "busy"}, full)
		h.waitLen(i + 1)
	}
	h.admitThrough(t.Context(), "other", Item{Endpoints: "other"}, idle)
	h.waitLen(n + 1)

	idle.open(1)
	// Every round tries the first waiter and looks at 2*scanLimit waiters
	// at most: a sweep through the queue takes n/scanLimit+3 rounds at most.
	rounds := 2 * (n/scanLimit + 3)
	start := full.triesSoFar()
	for r := 1; r <= rounds && len(idle.dispatched()) == 0; r++ {
		h.q.Notify()
		full.waitTries(start + r)
	}
	if got := idle.dispatched(); len(got) != 1 {
		t.Fatalf("request for endpoints with room, behind %d waiters for full ones: dispatched %v after %d rounds; want it dispatched", n, got, rounds)
	}
	if err := h.result("other"); err != nil {
		t.Errorf("other: %v", err)
	}
}

func TestBounds(t *testing.T) {
	type req struct {
		name string
		item Item
	}
	cases := map[string]struct {
		opts     Options
		queued   []req
		next     Item
		wantErr  error
		evicted  string
		wantLen  int
		wantByte float64
	}{
		"band length": {
			opts:     Options{MaxBandLen: 2},
			queued:   []req{{"a", Item{Bytes: 1}}, {"b", Item{Bytes: 1}}},
			next:     Item{Bytes: 1},
			wantErr:  ErrQueueFull,
			wantLen:  2,
			wantByte: 2,
		},
		"total length, same priority": {
			opts:     Options{MaxLen: 2},
			queued:   []req{{"a", Item{Bytes: 1}}, {"b", Item{Bytes: 1, Priority: 1}}},
			next:     Item{Bytes: 1},
			wantErr:  ErrQueueFull,
			wantLen:  2,
			wantByte: 2,
		},
		"total bytes": {
			opts:     Options{MaxBytes: 100},
			queued:   []req{{"a", Item{Bytes: 60}}},
			next:     Item{Bytes: 50},
			wantErr:  ErrQueueFull,
			wantLen:  1,
			wantByte: 60,
		},
		"request larger than the byte bound": {
			opts:     Options{MaxBytes: 100},
			queued:   []req{{"a", Item{Bytes: 10}}},
			next:     Item{Bytes: 101, Priority: 9},
			wantErr:  ErrQueueFull,
			wantLen:  1,
			wantByte: 10,
		},
		"higher priority evicts the newest of the lowest band": {
			opts: Options{MaxLen: 3},
			queued: []req{
				{"old-low", Item{Bytes: 1}},
				{"new-low", Item{Bytes: 2, FlowID: "other"}},
				{"mid", Item{Bytes: 3, Priority: 5}},
			},
			next:     Item{Bytes: 4, Priority: 10},
			evicted:  "new-low",
			wantLen:  3,
			wantByte: 8,
		},
		"bytes over the bound evict lower waiters": {
			opts: Options{MaxBytes: 100},
			queued: []req{
				{"old-low", Item{Bytes: 40}},
				{"new-low", Item{Bytes: 40}},
			},
			next:     Item{Bytes: 50, Priority: 1},
			evicted:  "new-low",
			wantLen:  2,
			wantByte: 90,
		},
		"no lower waiter is evicted when evicting them all leaves too few bytes": {
			opts: Options{MaxBytes: 100},
			queued: []req{
				{"high", Item{Bytes: 60, Priority: 10}},
				{"old-low", Item{Bytes: 15}},
				{"new-low", Item{Bytes: 15}},
			},
			next:     Item{Bytes: 50, Priority: 5},
			wantErr:  ErrQueueFull,
			wantLen:  3,
			wantByte: 90,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, tc.opts)
			for _, r := range tc.queued {
				h.admit(t.Context(), r.name, r.item)
			}
			if tc.wantErr != nil {
				err := h.q.Admit(t.Context(), tc.next, h.gate.try("next"))
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("Admit = %v, want %v", err, tc.wantErr)
				}
				// A refused request has evicted whatever it evicted.
				if got := h.q.Len(); got != tc.wantLen {
					t.Fatalf("%d waiting after the request was refused, want %d", got, tc.wantLen)
				}
			} else {
				h.admitAsync(t.Context(), "next", tc.next)
			}
			if tc.evicted != "" {
				if err := h.result(tc.evicted); !errors.Is(err, ErrEvicted) {
					t.Errorf("%s: Admit = %v, want %v", tc.evicted, err, ErrEvicted)
				}
			}
			h.waitLen(tc.wantLen)
			if got := h.gaugeSum(t, "inferpick_flowcontrol_queue_bytes"); got != tc.wantByte {
				t.Errorf("queued bytes = %v, want %v", got, tc.wantByte)
			}
			if got := h.gaugeSum(t, "inference_extension_flow_control_queue_size"); got != float64(tc.wantLen) {
				t.Errorf("upstream queue size = %v, want %v", got, tc.wantLen)
			}
		})
	}
}

// One tenant's burst fills its priority's band; a request of another tenant
// of that priority still gets a place, and so its turn: it pushes out the
// newest waiter of the flow holding the most places, which gets the
// queue-full answer it would have got on arriving then. A flow that holds
// as many places as any other is refused as before, so the bounds hold.
func TestOneTenantsBurstDoesNotLockAnotherOutOfItsBand(t *testing.T) {
	h := newHarness(t, Options{MaxBandLen: 4, MaxLen: 100})
	for i := range 4 {
		h.admit(t.Context(), fmt.Sprint("noisy-", i), Item{FlowID: "noisy", Endpoints: "m", Bytes: 10})
	}
	h.admitAsync(t.Context(), "quiet", Item{FlowID: "quiet", Endpoints: "m", Bytes: 1})
	if name, err := h.first("quiet", "noisy-3"); name == "quiet" {
		t.Fatalf("the quiet tenant's only request: Admit = %v while the noisy tenant holds all 4 places of the band; want it queued to take its turn", err)
	} else if !errors.Is(err, ErrQueueFull) {
		t.Fatalf("the noisy tenant's newest waiter: Admit = %v, want %v once the quiet tenant took its place", err, ErrQueueFull)
	}
	h.waitLen(4)
	if err := h.q.Admit(t.Context(), Item{FlowID: "noisy", Endpoints: "m", Bytes: 10}, h.gate.try("noisy-4")); !errors.Is(err, ErrQueueFull) {
		t.Errorf("the noisy tenant's next request, holding 3 of 4 places: Admit = %v, want %v", err, ErrQueueFull)
	}
	if got := h.gaugeSum(t, "inferpick_flowcontrol_queue_length"); got != 4 {
		t.Errorf("queue length gauge = %v, want 4", got)
	}
	if got := h.gaugeSum(t, "inferpick_flowcontrol_queue_bytes"); got != 31 {
		t.Errorf("queued bytes = %v, want 31 (three noisy waiters of 10, the quiet one of 1)", got)
	}
	h.gate.open(4)
	h.q.Notify()
	for _, n := range []string{"noisy-0", "noisy-1", "noisy-2", "quiet"} {
		if err := h.result(n); err != nil {
			t.Errorf("%s: Admit = %v", n, err)
		}
	}
	if diff := cmp.Diff([]string{"noisy-0", "quiet", "noisy-1", "noisy-2"}, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatch order (-want +got):\n%s", diff)
	}
	h.waitLen(0)
	for _, g := range gaugeNames {
		if got := h.gaugeSum(t, g); got != 0 {
			t.Errorf("%s = %v once the queue is empty, want 0", g, got)
		}
	}
}

func TestNegativePriorityIsShed(t *testing.T) {
	h := newHarness(t, Options{})
	err := h.q.Admit(t.Context(), Item{Priority: -1}, h.gate.try("sheddable"))
	if !errors.Is(err, ErrShed) {
		t.Errorf("Admit = %v, want %v", err, ErrShed)
	}
	if got := h.samples(t, "inference_extension_flow_control_request_queue_duration_seconds", map[string]string{"outcome": "RejectedCapacity", "priority": "-1"}); got != 1 {
		t.Errorf("upstream RejectedCapacity observations = %v, want 1", got)
	}
	if got := h.q.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
}

// The upstream EPP's enqueue-duration, dispatch-cycle and pool-saturation
// series, which its dashboard reads, are exported with its names, labels
// and buckets: a request that enters the queue, one the queue turns away
// and one shed are each counted once by fairness id, priority and outcome,
// so the dashboard's queue-duration panel finds the flows it joins on; each
// dispatch round is timed; the saturation is read when scraped.
func TestUpstreamEnqueueDispatchAndSaturationSeries(t *testing.T) {
	var saturation atomic.Uint64
	saturation.Store(math.Float64bits(0.25))
	h := newHarness(t, Options{MaxBandLen: 1}, WithSaturation(func() float64 { return math.Float64frombits(saturation.Load()) }))
	const enqueue = "inference_extension_flow_control_request_enqueue_duration_seconds"
	const cycle = "inference_extension_flow_control_dispatch_cycle_duration_seconds"
	const sat = "inference_extension_flow_control_pool_saturation"

	h.admit(t.Context(), "queued", Item{FlowID: "tenant-a", Priority: 3, Endpoints: "m"})
	if err := h.q.Admit(t.Context(), Item{FlowID: "tenant-a", Priority: 3, Endpoints: "m"}, h.gate.try("refused")); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("Admit over the band bound = %v, want %v", err, ErrQueueFull)
	}
	if err := h.q.Admit(t.Context(), Item{FlowID: "tenant-c", Priority: -1, Endpoints: "m"}, h.gate.try("shed")); !errors.Is(err, ErrShed) {
		t.Fatalf("Admit of a sheddable request = %v, want %v", err, ErrShed)
	}
	want := map[string]float64{
		"fairness_id=tenant-a,outcome=NotYetFinalized,priority=3":   1,
		"fairness_id=tenant-a,outcome=RejectedCapacity,priority=3":  1,
		"fairness_id=tenant-c,outcome=RejectedCapacity,priority=-1": 1,
	}
	if diff := cmp.Diff(want, h.family(t, enqueue)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", enqueue, diff)
	}

	h.gate.open(1)
	h.q.Notify()
	if err := h.result("queued"); err != nil {
		t.Fatalf("queued: %v", err)
	}
	if got := h.samples(t, "inference_extension_flow_control_request_queue_duration_seconds",
		map[string]string{"fairness_id": "tenant-a", "priority": "3", "outcome": "Dispatched"}); got != 1 {
		t.Errorf("queue durations of the dispatched flow = %v, want 1 beside its enqueue duration", got)
	}
	for h.samples(t, cycle, nil) == 0 { // the round that dispatched it is timed when it ends
		runtime.Gosched()
	}
	if got := h.family(t, cycle); len(got) != 1 || got[""] == 0 {
		t.Errorf("%s = %v, want one series without labels", cycle, got)
	}
	upstream := []float64{0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1}
	for _, name := range []string{enqueue, cycle} {
		if diff := cmp.Diff(upstream, h.buckets(t, name)); diff != "" {
			t.Errorf("%s buckets (-want +got):\n%s", name, diff)
		}
	}

	if diff := cmp.Diff(map[string]float64{"inference_pool=pool": 0.25}, h.family(t, sat)); diff != "" {
		t.Errorf("%s (-want +got):\n%s", sat, diff)
	}
	saturation.Store(math.Float64bits(1))
	if diff := cmp.Diff(map[string]float64{"inference_pool=pool": 1}, h.family(t, sat)); diff != "" {
		t.Errorf("%s once the pool filled (-want +got):\n%s", sat, diff)
	}
}

// Fairness ids come from a request header and models from its body: the
// upstream series name the first 256 fairness ids and count the rest under
// __other__, and a queue-size series goes once no waiter of its labels is
// left, even one a flow shared between two models.
func TestFairnessIdsAndModelsKeepTheSeriesBounded(t *testing.T) {
	const size = "inference_extension_flow_control_queue_size"
	const bytes = "inference_extension_flow_control_queue_bytes"
	const wait = "inference_extension_flow_control_request_queue_duration_seconds"
	h := newHarness(t, Options{MaxLen: 1000, MaxBandLen: 1000})
	cancels := map[string]context.CancelFunc{}
	queue := func(name string, it Item) {
		ctx, cancel := context.WithCancel(t.Context())
		cancels[name] = cancel
		h.admit(ctx, name, it)
	}
	leave := func(name string) {
		cancels[name]()
		if err := h.result(name); !errors.Is(err, context.Canceled) {
			t.Fatalf("%s: %v, want it cancelled", name, err)
		}
	}
	// One flow with requests for two models; the one for "x" leaves first.
	queue("a-x", Item{FlowID: "a", Model: "x", TargetModel: "x", Bytes: 10})
	queue("a-y", Item{FlowID: "a", Model: "y", TargetModel: "y", Bytes: 10})
	for i := range 300 {
		queue(fmt.Sprint("tenant-", i), Item{FlowID: fmt.Sprint("tenant-", i), Model: "x", TargetModel: "x", Bytes: 1})
	}
	if got := h.seriesCount(t, size); got != maxFlows+2 {
		t.Errorf("%d %s series for 301 fairness ids, want %d (the first %d, one of them with two models, and %s)", got, size, maxFlows+2, maxFlows, otherFlow)
	}
	if got := h.gaugeSum(t, size); got != 302 {
		t.Errorf("%s adds up to %v, want the 302 waiting", size, got)
	}
	leave("a-x")
	for i := range 300 {
		leave(fmt.Sprint("tenant-", i))
	}
	leave("a-y")
	for _, name := range []string{size, bytes} {
		if got := h.family(t, name); len(got) != 0 {
			t.Errorf("%s once nothing waits: %v, want no series", name, got)
		}
	}
	flows := map[string]bool{}
	for labels := range h.family(t, wait) {
		for _, l := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(l, "fairness_id="); ok {
				flows[v] = true
			}
		}
	}
	if len(flows) != maxFlows+1 || !flows[otherFlow] {
		t.Errorf("%s names %d fairness ids, want %d with %s", wait, len(flows), maxFlows+1, otherFlow)
	}
}

func TestTimeout(t *testing.T) {
	h := newHarness(t, Options{MaxWait: time.Second})
	h.admit(t.Context(), "slow", Item{Bytes: 7})
	for !h.clock.HasWaiters() { // the waiter arms its MaxWait timer right after queueing
		runtime.Gosched()
	}
	h.clock.Step(999 * time.Millisecond)
	h.admit(t.Context(), "second", Item{})
	h.clock.Step(time.Millisecond)
	if err := h.result("slow"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("Admit = %v, want %v", err, ErrTimeout)
	}
	h.waitLen(1)
	if got := h.gaugeSum(t, "inferpick_flowcontrol_queue_bytes"); got != 0 {
		t.Errorf("queued bytes = %v, want 0", got)
	}
	got := map[string]float64{
		"timeouts":            h.samples(t, "inferpick_flowcontrol_requests_total", map[string]string{"outcome": "timeout"}),
		"waits":               h.samples(t, "inferpick_flowcontrol_wait_seconds", map[string]string{"outcome": "timeout"}),
		"upstream EvictedTTL": h.samples(t, "inference_extension_flow_control_request_queue_duration_seconds", map[string]string{"outcome": "EvictedTTL", "inference_pool": "pool"}),
	}
	want := map[string]float64{"timeouts": 1, "waits": 1, "upstream EvictedTTL": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recorded outcomes (-want +got):\n%s", diff)
	}
}

func TestCancelLeavesAtOnce(t *testing.T) {
	h := newHarness(t, Options{})
	ctx, cancel := context.WithCancel(t.Context())
	h.admit(ctx, "gone", Item{Bytes: 5})
	h.admit(t.Context(), "stays", Item{Bytes: 3})
	cancel()
	if err := h.result("gone"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Admit = %v, want %v", err, context.Canceled)
	}
	h.waitLen(1)
	if got := h.gaugeSum(t, "inferpick_flowcontrol_queue_bytes"); got != 3 {
		t.Errorf("queued bytes = %v, want 3", got)
	}
	h.gate.open(1)
	h.q.Notify()
	if err := h.result("stays"); err != nil {
		t.Errorf("stays: %v", err)
	}
	if diff := cmp.Diff([]string{"stays"}, h.gate.dispatched()); diff != "" {
		t.Errorf("dispatched (-want +got):\n%s", diff)
	}
}

func TestCancellationStorm(t *testing.T) {
	h := newHarness(t, Options{MaxLen: 64, MaxBandLen: 32, MaxBytes: 4096})
	ctx, cancel := context.WithCancel(t.Context())
	const n = 400
	for i := range n {
		it := Item{Priority: i % 4, FlowID: fmt.Sprint(i % 7), Bytes: int64(i % 100)}
		h.admitAsync(ctx, fmt.Sprint(i), it)
	}
	// Every request is either queued or turned away before the cancel;
	// dispatch attempts run meanwhile and none can succeed.
	for {
		h.q.Notify()
		h.mu.Lock()
		settled := len(h.errs) + h.q.Len()
		h.mu.Unlock()
		if settled == n {
			break
		}
		runtime.Gosched()
	}
	if h.q.Len() == 0 {
		t.Fatal("nothing queued before the cancel")
	}
	cancel()
	h.wg.Wait()
	for i := range n {
		err := h.result(fmt.Sprint(i))
		if err == nil {
			t.Fatalf("request %d was dispatched with no capacity", i)
		}
		if !errors.Is(err, context.Canceled) && !errors.Is(err, ErrQueueFull) && !errors.Is(err, ErrEvicted) {
			t.Errorf("request %d: Admit = %v", i, err)
		}
	}
	if got := h.q.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
	for _, name := range gaugeNames {
		if got := h.gaugeSum(t, name); got != 0 {
			t.Errorf("%s = %v, want 0", name, got)
		}
	}
	if got := h.seriesCount(t, "inference_extension_flow_control_queue_size"); got != 0 {
		t.Errorf("per-flow series left after every flow emptied: %d", got)
	}
}

func TestStopReleasesWaiters(t *testing.T) {
	h := newHarness(t, Options{})
	q, err := New(Options{}, WithClock(h.clock))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	started := make(chan error, 1)
	go func() { started <- q.Start(ctx) }()
	res := make(chan error, 1)
	go func() { res <- q.Admit(t.Context(), Item{}, h.gate.try("w")) }()
	for q.Len() != 1 {
		runtime.Gosched()
	}
	cancel()
	if err := <-res; !errors.Is(err, ErrStopped) {
		t.Errorf("Admit = %v, want %v", err, ErrStopped)
	}
	if err := <-started; err != nil {
		t.Errorf("Start = %v", err)
	}
	if got := q.Len(); got != 0 {
		t.Errorf("Len = %d, want 0", got)
	}
}

// A request of a higher priority that arrives while a sweep is past its
// place still goes before a waiting request of a lower priority for the
// same model: the sweep, reaching the lower one, tries it first.
func TestASweepDoesNotPassAHigherPriorityArrivalForTheSameModel(t *testing.T) {
	// No dispatcher runs: the test runs each round itself.
	q, err := New(Options{}, WithClock(testingclock.NewFakeClock(epoch)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	full, model := &gate{}, &gate{}
	admit := func(name string, it Item, g *gate) {
		want := q.Len() + 1
		wg.Go(func() { _ = q.Admit(ctx, it, g.try(name)) })
		for q.Len() != want {
			runtime.Gosched()
		}
	}
	// Busy adapters, each its own endpoint set, fill a round's head part
	// (priority 10) and its sweep part (priority 0), which stops just
	// before the low-priority request for the model.
	for i := range 2 * maxFullPerRound {
		admit(fmt.Sprint("adapter-", i), Item{Priority: 10 * (1 - i/maxFullPerRound), Endpoints: fmt.Sprint("adapter-", i)}, full)
	}
	admit("low", Item{Endpoints: "model"}, model)
	before := full.triesSoFar()
	q.dispatch(ctx)
	if n := full.triesSoFar() - before; n != 2*maxFullPerRound {
		t.Fatalf("the first round tried the adapters %d times, want %d", n, 2*maxFullPerRound)
	}
	admit("high", Item{Priority: 10, Endpoints: "model"}, model)
	model.open(1)
	q.dispatch(ctx)
	if diff := cmp.Diff([]string{"high"}, model.dispatched()); diff != "" {
		t.Errorf("dispatched for the model's one free place (-want +got):\n%s", diff)
	}
}
