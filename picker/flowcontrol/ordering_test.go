package flowcontrol

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// by is an item of flow "f" whose deadline is ms milliseconds after the
// epoch, none for 0, of priority prio.
func by(ms, prio int) Item {
	it := Item{FlowID: "f", Priority: prio}
	if ms > 0 {
		it.Deadline = epoch.Add(time.Duration(ms) * time.Millisecond)
	}
	return it
}

// With OrderDeadline a flow serves its waiters earliest deadline first,
// first come first served among equal deadlines, those without a deadline
// after every one with; bands stay strict and flows take turns. Under
// OrderFCFS deadlines change nothing.
func TestDispatchOrderByDeadline(t *testing.T) {
	type req = namedItem
	cases := map[string]struct {
		ordering string
		reqs     []req
		want     []string
	}{
		"earliest deadline first": {
			ordering: OrderDeadline,
			reqs:     []req{{"300", by(300, 0)}, {"100", by(100, 0)}, {"200", by(200, 0)}},
			want:     []string{"100", "200", "300"},
		},
		"equal deadlines first come first served": {
			ordering: OrderDeadline,
			reqs:     []req{{"a100", by(100, 0)}, {"b100", by(100, 0)}, {"c50", by(50, 0)}, {"d100", by(100, 0)}},
			want:     []string{"c50", "a100", "b100", "d100"},
		},
		"no deadline after every deadline": {
			ordering: OrderDeadline,
			reqs:     []req{{"none1", by(0, 0)}, {"200", by(200, 0)}, {"none2", by(0, 0)}, {"900", by(900, 0)}},
			want:     []string{"200", "900", "none1", "none2"},
		},
		"bands stay strict": {
			ordering: OrderDeadline,
			reqs:     []req{{"low10", by(10, 0)}, {"high-none", by(0, 5)}, {"high500", by(500, 5)}},
			want:     []string{"high500", "high-none", "low10"},
		},
		"flows take turns": {
			ordering: OrderDeadline,
			reqs: []req{
				{"a300", by(300, 0)}, {"a100", by(100, 0)},
				{"b200", Item{FlowID: "b", Deadline: epoch.Add(200 * time.Millisecond)}},
			},
			want: []string{"a100", "b200", "a300"},
		},
		"first come first served ignores deadlines": {
			ordering: OrderFCFS,
			reqs:     []req{{"none", by(0, 0)}, {"300", by(300, 0)}, {"100", by(100, 0)}},
			want:     []string{"none", "300", "100"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { checkDispatchOrder(t, Options{Ordering: tc.ordering}, tc.reqs, tc.want) })
	}
}

// A dispatch that goes past requests whose endpoints are full reaches the
// others by deadline too.
func TestDeadlineOrderGoesPastFullEndpoints(t *testing.T) {
	h := newHarness(t, Options{Ordering: OrderDeadline})
	full, free := &gate{}, &gate{}
	for _, r := range []struct {
		name, model string
		ms          int
		g           *gate
	}{{"a50", "model-a", 50, full}, {"b300", "model-b", 300, free}, {"b-none", "model-b", 0, free}, {"b100", "model-b", 100, free}} {
		it := by(r.ms, 0)
		it.Endpoints = r.model
		want := h.q.Len() + 1
		h.admitThrough(t.Context(), r.name, it, r.g)
		h.waitLen(want)
	}
	free.open(3)
	h.q.Notify()
	for _, n := range []string{"b300", "b-none", "b100"} {
		if err := h.result(n); err != nil {
			t.Errorf("%s: Admit = %v", n, err)
		}
	}
	if diff := cmp.Diff([]string{"b100", "b300", "b-none"}, free.dispatched()); diff != "" {
		t.Errorf("dispatch order (-want +got):\n%s", diff)
	}
}

func TestAnUnknownOrderingIsRefused(t *testing.T) {
	_, err := New(Options{Ordering: "lifo"})
	if err == nil || !strings.Contains(err.Error(), `ordering "lifo" is not fcfs or slo-deadline`) {
		t.Errorf("New = %v, want the ordering refused", err)
	}
}
