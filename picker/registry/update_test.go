package registry

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestUpdateTouchesOnlyWhatChanged checks that one pod's change leaves
// every other worker the same object, in the same order, and that the
// snapshot is replaced only when membership changes.
func TestUpdateTouchesOnlyWhatChanged(t *testing.T) {
	r := New()
	rec := &recorder{}
	eps := benchEndpoints(50)
	r.Replace(eps)
	r.AddListener(rec)
	before := slices.Clone(r.Workers())

	steps := map[string]struct {
		upsert     []Endpoint
		remove     []Key
		wantEvents []string
		changed    []Key // keys whose worker is new or gone
	}{
		"nothing changed": {upsert: eps[3:5]},
		"one pod leaves": {
			remove: []Key{eps[7].Key}, wantEvents: []string{"-uid-7"}, changed: []Key{eps[7].Key},
		},
		"one pod joins": {
			upsert:     []Endpoint{endpoint("new", "10.0.0.200:8000")},
			wantEvents: []string{"+new"}, changed: []Key{{UID: "new", Port: 8000}},
		},
		"a pod is replaced under the same name (new UID)": {
			upsert:     []Endpoint{endpoint("uid-9b", eps[9].Address.String())},
			remove:     []Key{eps[9].Key},
			wantEvents: []string{"-uid-9", "+uid-9b"}, changed: []Key{eps[9].Key, {UID: "uid-9b", Port: 8000}},
		},
		"a pod's address changes": {
			upsert:     []Endpoint{{Key: eps[11].Key, Namespace: "ns", Name: eps[11].Name, Address: mustAddr("10.9.9.9:8000")}},
			wantEvents: []string{"-uid-11", "+uid-11"}, changed: []Key{eps[11].Key},
		},
		"unknown keys are ignored": {remove: []Key{{UID: "missing", Port: 1}}},
	}
	for name, s := range steps {
		t.Run(name, func(t *testing.T) {
			r.Replace(eps)
			before = slices.Clone(r.Workers())
			snap := r.snapshot.Load()
			rec.events = nil

			r.Update(s.upsert, s.remove)

			if diff := cmp.Diff(s.wantEvents, rec.events); diff != "" {
				t.Errorf("listener events (-want +got):\n%s", diff)
			}
			if len(s.changed) == 0 && r.snapshot.Load() != snap {
				t.Error("a change of nothing published a new snapshot")
			}
			changed := func(w *Worker) bool { return slices.Contains(s.changed, w.Endpoint().Key) }
			var kept []*Worker
			for _, w := range before {
				if !changed(w) {
					kept = append(kept, w)
				}
			}
			var after []*Worker
			for _, w := range r.Workers() {
				if !changed(w) {
					after = append(after, w)
				}
			}
			// Pointer equality: the same objects, in the same order.
			if !slices.Equal(kept, after) {
				t.Error("workers the change did not name were replaced or reordered")
			}
			for _, w := range before {
				if changed(w) != w.Removed() {
					t.Errorf("worker %s removed = %v, want %v", w.Endpoint().Key.UID, w.Removed(), changed(w))
				}
			}
			assertSorted(t, r)
		})
	}
}

// TestUpdateKeepsOrder applies random batches of changes, some of them
// parking workers (their pods unready), and checks the snapshots against
// the registry's map, sorted from scratch.
func TestUpdateKeepsOrder(t *testing.T) {
	r := New()
	rng := rand.New(rand.NewPCG(1, 2))
	held := map[Key]Endpoint{} // the workers of the registry, as Endpoint reports them
	for round := range 300 {
		var up []Endpoint
		var rm []Key
		for range rng.IntN(4) {
			i := rng.IntN(200)
			addr := mustAddr("10.0." + strconv.Itoa(rng.IntN(3)) + "." + strconv.Itoa(i) + ":8000")
			ep := Endpoint{Key: Key{UID: "uid-" + strconv.Itoa(i), Port: 8000}, Name: "pod", Address: addr, Unready: rng.IntN(3) == 0}
			up = append(up, ep)
		}
		for k := range held {
			if rng.IntN(10) == 0 {
				rm = append(rm, k)
			}
		}
		for _, k := range rm {
			delete(held, k)
		}
		// Removals run first: a key both removed and upserted stays. An
		// unready endpoint parks the worker of the same server, and makes
		// none.
		for _, ep := range up {
			if old, ok := held[ep.Key]; ep.Unready && (!ok || old.Address != ep.Address) {
				delete(held, ep.Key)
				continue
			}
			held[ep.Key] = ep
		}
		r.Update(up, rm)
		all := r.AllWorkers()
		if len(all) != len(held) {
			t.Fatalf("round %d: %d workers with the parked ones, want %d", round, len(all), len(held))
		}
		live := 0
		for _, w := range all {
			if held[w.Endpoint().Key] != w.Endpoint() || w.Removed() {
				t.Fatalf("round %d: worker %v not held", round, w.Endpoint())
			}
			if !w.Parked() {
				live++
			}
		}
		if len(r.Workers()) != live {
			t.Fatalf("round %d: %d workers, want %d", round, len(r.Workers()), live)
		}
		for _, w := range r.Workers() {
			if !w.Live() {
				t.Fatalf("round %d: worker %v not live", round, w.Endpoint())
			}
		}
		assertSorted(t, r)
	}
}

func assertSorted(t *testing.T, r *Registry) {
	t.Helper()
	ws, all := r.Workers(), r.AllWorkers()
	for _, ws := range [][]*Worker{ws, all} {
		if !slices.IsSortedFunc(ws, compareWorkers) {
			t.Errorf("snapshot out of order: %v", addresses(ws))
		}
	}
	if len(all) != len(r.byKey) {
		t.Errorf("all workers are %d, the registry holds %d", len(all), len(r.byKey))
	}
	parked := 0
	for _, w := range r.byKey {
		if w.Parked() {
			parked++
		}
	}
	if len(ws) != len(r.byKey)-parked {
		t.Errorf("snapshot holds %d workers, the registry %d of which %d parked", len(ws), len(r.byKey), parked)
	}
}

func mustAddr(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }
