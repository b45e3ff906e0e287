package framework

import (
	"net/netip"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/observe"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// The pool is idle when every count of every worker is zero: counts that
// cancel out in a sum (one gone negative) are a leak to report, not idle.
func TestBusy(t *testing.T) {
	for name, tc := range map[string]struct {
		workers []observe.WorkerView
		busy    bool
	}{
		"no workers":            {},
		"all zero":              {workers: []observe.WorkerView{{}, {}}},
		"one in flight":         {workers: []observe.WorkerView{{Load: 1, Decode: 1}, {}}, busy: true},
		"loads that cancel out": {workers: []observe.WorkerView{{Load: 1, Decode: 1}, {Load: -1, Decode: -1}}, busy: true},
		"phases that cancel":    {workers: []observe.WorkerView{{Prefill: -1, Decode: 1}}, busy: true},
	} {
		t.Run(name, func(t *testing.T) {
			if err := Busy(observe.WorkersView{Workers: tc.workers}); (err != nil) != tc.busy {
				t.Errorf("Busy = %v, want busy %v", err, tc.busy)
			}
		})
	}
}

// A request still counted on a worker parked while its pod is unready keeps
// the pool busy: a count leaked there must not pass for idle. The parked
// worker is not one of the workers WaitWorkers waits for.
func TestAParkedWorkersRequestsAreNotIdle(t *testing.T) {
	reg := registry.New()
	ep := registry.Endpoint{Key: registry.Key{UID: "a", Port: 8000}, Name: "pod-a", Address: netip.MustParseAddrPort("127.0.0.1:8000")}
	registrytest.Upsert(reg, registry.Endpoint{Key: registry.Key{UID: "b", Port: 8000}, Name: "pod-b", Address: netip.MustParseAddrPort("127.0.0.2:8000")})
	g := registrytest.Upsert(reg, ep).Admit()
	ep.Unready = true
	reg.Update([]registry.Endpoint{ep}, nil)

	v := observe.Snapshot(reg, time.Now(), nil)
	if err := Busy(v); err == nil {
		t.Error("Busy = nil with a request in flight on the parked worker, want busy")
	}
	if n := v.Live(); n != 1 {
		t.Errorf("Live() = %d with one of two workers parked, want 1", n)
	}
	g.Release()
	if err := Busy(observe.Snapshot(reg, time.Now(), nil)); err != nil {
		t.Errorf("Busy = %v once the parked worker's request ended, want idle", err)
	}
}
