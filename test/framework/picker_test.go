package framework

import (
	"testing"

	"github.com/inferpick/inferpick/picker/observe"
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
