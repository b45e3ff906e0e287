package policy

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// loraWorker reports a complete model list (base llama and the adapters)
// and a LoRA state of slots adapter slots with active ones in use, scraped at.
func loraWorker(w *registry.Worker, at time.Time, slots int, active ...string) {
	w.SetMetrics(&registry.Metrics{
		Served: &registry.Served{
			Bases:    []string{"llama"},
			Adapters: adaptersOf("llama", "a", "b", "c", "d", "hot", "z"),
			Complete: true,
		},
		LoRA:    &registry.LoRA{Max: slots, Active: active},
		Scraped: at,
	})
}

func adaptersOf(parent string, names ...string) []registry.Adapter {
	out := make([]registry.Adapter, len(names))
	for i, n := range names {
		out[i] = registry.Adapter{Name: n, Parent: parent}
	}
	return out
}

func pickModel(t *testing.T, p Policy, model string, ws []*registry.Worker) *registry.Worker {
	t.Helper()
	got, err := p.Pick(&Request{Model: model, Prompt: [][]byte{[]byte("hello")}}, ws, 1)
	if err != nil {
		t.Fatalf("Pick(%s): %v", model, err)
	}
	return got[0]
}

// holdDecode keeps n decoding requests on w until the test ends.
func holdDecode(t *testing.T, w *registry.Worker, n int) {
	for range n {
		g := w.Admit()
		g.FirstToken()
		t.Cleanup(func() { g.Release() })
	}
}

func TestLoRAAffinityPrefersWhereTheAdapterRuns(t *testing.T) {
	for _, name := range []string{CacheAware, WeightedScorer} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(4)
			for i, w := range ws {
				active := []string{}
				if i == 2 {
					active = []string{"a"}
				}
				loraWorker(w, epoch, 2, active...)
			}
			p := build(t, Config{Name: name, WeightedScorer: WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, LoRAWeight: 1}}, reg, nil)
			// Some load on the holder does not move the adapter: loading it
			// elsewhere costs more.
			holdDecode(t, ws[2], 1)
			for i := range 5 {
				if got := pickModel(t, p, "a", ws); got != ws[2] {
					t.Fatalf("pick %d of adapter a went to %s, want %s where it runs", i, got.Address(), ws[2].Address())
				}
			}
		})
	}
}

func TestLoRAAffinityPrefersAFreeSlot(t *testing.T) {
	reg, ws := pool(3)
	loraWorker(ws[0], epoch, 2, "a", "b")
	loraWorker(ws[1], epoch, 2, "c")
	loraWorker(ws[2], epoch, 2, "c", "d")
	p := build(t, Config{}, reg, nil)
	if got := pickModel(t, p, "z", ws); got != ws[1] {
		t.Errorf("adapter z went to %s, want %s, the only worker with a free slot", got.Address(), ws[1].Address())
	}
}

// A loaded adapter keeps its requests until the load there outweighs a
// load elsewhere; then it spreads.
func TestLoRAAffinityHotAdapterSpreads(t *testing.T) {
	reg, ws := pool(4)
	for _, w := range ws {
		loraWorker(w, epoch, 4)
	}
	p := build(t, Config{}, reg, nil)
	used := map[string]int{}
	var first *registry.Worker
	for i := range 40 {
		got := pickModel(t, p, "hot", ws)
		if i == 0 {
			first = got
		}
		used[got.Address()]++
		holdDecode(t, got, 1)
	}
	if used[first.Address()] < 4 {
		t.Errorf("the first worker took %d of 40, want the adapter kept there while lightly loaded: %v", used[first.Address()], used)
	}
	if len(used) < 3 {
		t.Errorf("the hot adapter stayed on %d workers with 40 requests in flight, want it spread: %v", len(used), used)
	}
}

// An adapter sent to a worker stays there, loading and then idle but
// loaded, though newer scrapes do not list it (vLLM lists adapters in use
// only).
func TestLoRAAffinityRemembersDecisions(t *testing.T) {
	reg, ws := pool(4)
	for _, w := range ws {
		loraWorker(w, epoch, 4)
	}
	clk := &clock{t: epoch.Add(time.Second)}
	p := build(t, Config{}, reg, clk)
	first := pickModel(t, p, "b", ws)
	for i := range 10 {
		// A newer scrape of every worker, without b.
		clk.t = clk.t.Add(time.Millisecond)
		for _, w := range ws {
			loraWorker(w, clk.t, 4)
		}
		if got := pickModel(t, p, "b", ws); got != first {
			t.Fatalf("pick %d of b went to %s, want %s where it was sent", i, got.Address(), first.Address())
		}
	}
}

// The adapters sent to a worker are taken as loaded while they are among
// its max_lora most recently sent, as vLLM evicts the least recently used.
func TestLoRARecentDecisionsFollowLRU(t *testing.T) {
	reg, ws := pool(2)
	for _, w := range ws {
		loraWorker(w, epoch, 2)
	}
	a := newLoRAAffinity(reg)
	send := func(w *registry.Worker, model string) {
		a.record(&pick{req: &Request{Model: model}}, w)
	}
	loaded := func(w *registry.Worker, model string) bool {
		p := &pick{req: &Request{Model: model}}
		return a.state(p, &candidate{w: w, metrics: w.Metrics()}) == adapterResident
	}
	send(ws[0], "a")
	send(ws[0], "b")
	send(ws[0], "a") // a used again: b is now the least recently used
	send(ws[0], "c") // evicts b
	for model, want := range map[string]bool{"a": true, "b": false, "c": true, "d": false} {
		if got := loaded(ws[0], model); got != want {
			t.Errorf("adapter %s loaded on the worker = %v, want %v", model, got, want)
		}
	}
	if loaded(ws[1], "a") {
		t.Errorf("adapter a counted as loaded on a worker it was never sent to")
	}
	// A base model involves no adapter and is never recorded.
	send(ws[1], "llama")
	if st := a.state(&pick{req: &Request{Model: "llama"}}, &candidate{w: ws[1], metrics: ws[1].Metrics()}); st != adapterNone {
		t.Errorf("base model state = %v, want adapterNone", st)
	}
}

// A scrape can land between the engine reading a worker's metrics and the
// ranker weighing its adapter: the pick classifies the worker by the
// metrics it was admitted with alone, never by parts of two scrapes (the
// first pages of a server, before vLLM reports its LoRA state, beside a
// newer scrape that has it made the pick panic).
func TestLoRAStateReadsTheMetricsThePickAdmitted(t *testing.T) {
	served := &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", "a"), Complete: true}
	noLoRA := &registry.Metrics{Served: served, Scraped: epoch}
	running := &registry.Metrics{Served: served, LoRA: &registry.LoRA{Max: 2, Active: []string{"a"}}, Scraped: epoch}
	full := &registry.Metrics{Served: served, LoRA: &registry.LoRA{Max: 1, Active: []string{"b"}}, Scraped: epoch}
	tests := map[string]struct {
		admitted, current *registry.Metrics
		want              adapterState
	}{
		"LoRA state only in the newer scrape": {admitted: noLoRA, current: full, want: adapterNone},
		"LoRA state gone in the newer scrape": {admitted: running, current: noLoRA, want: adapterResident},
		"adapter done in the newer scrape":    {admitted: running, current: full, want: adapterResident},
		"stale: the newest scrape":            {admitted: nil, current: full, want: adapterFull},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(1)
			ws[0].SetMetrics(tc.current)
			a := newLoRAAffinity(reg)
			got := a.state(&pick{req: &Request{Model: "a"}}, &candidate{w: ws[0], metrics: tc.admitted})
			if got != tc.want {
				t.Errorf("state = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestModelFilter(t *testing.T) {
	llama := &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", "sql"), Complete: true}
	llamaOnly := &registry.Served{Bases: []string{"llama"}, Complete: true}
	qwen := &registry.Served{Bases: []string{"qwen"}, Adapters: adaptersOf("qwen", "tool"), Complete: true}
	fromMetrics := &registry.Served{Bases: []string{"qwen"}}
	llamaFromMetrics := &registry.Served{Bases: []string{"llama"}}
	qwenFromMetrics := fromMetrics
	tests := map[string]struct {
		served  []*registry.Served
		model   string
		want    []int // workers the picks may land on; nil with wantErr
		wantErr error
	}{
		"base model":                     {served: []*registry.Served{llama, llama, qwen, qwen}, model: "qwen", want: []int{2, 3}},
		"adapter listed":                 {served: []*registry.Served{llama, llama, qwen, qwen}, model: "tool", want: []int{2, 3}},
		"adapter only where listed":      {served: []*registry.Served{llama, llamaOnly, qwen, qwen}, model: "sql", want: []int{0}},
		"adapter by its parent":          {served: []*registry.Served{llama, llamaOnly, llamaFromMetrics, qwenFromMetrics}, model: "sql", want: []int{0, 2}},
		"nobody serves it":               {served: []*registry.Served{llama, llama, qwen, qwen}, model: "mistral", wantErr: ErrModelNotServed},
		"nobody reported: no filter":     {served: []*registry.Served{nil, nil, nil, nil}, model: "mistral", want: []int{0, 1, 2, 3}},
		"unknown lists when none serves": {served: []*registry.Served{llama, nil, fromMetrics, qwen}, model: "mistral", want: []int{1, 2}},
		"metrics names count":            {served: []*registry.Served{llama, llama, fromMetrics, llamaOnly}, model: "qwen", want: []int{2}},
		"unreported workers stay":        {served: []*registry.Served{nil, llama, fromMetrics, nil}, model: "qwen", want: []int{0, 2, 3}},
		"no model: no filter":            {served: []*registry.Served{llama, llama, qwen, qwen}, model: "", want: []int{0, 1, 2, 3}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(len(tc.served))
			for i, s := range tc.served {
				ws[i].SetMetrics(&registry.Metrics{Served: s, Scraped: epoch})
			}
			p := build(t, Config{Name: LeastLoad}, reg, nil)
			allowed := map[*registry.Worker]bool{}
			for _, i := range tc.want {
				allowed[ws[i]] = true
			}
			seen := map[*registry.Worker]bool{}
			for i := range 40 {
				got, err := p.Pick(&Request{Model: tc.model}, ws, 2)
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Pick() error = %v, want %v", err, tc.wantErr)
				}
				for _, w := range got {
					if !allowed[w] {
						t.Fatalf("pick %d returned %s, which does not serve %q", i, w.Address(), tc.model)
					}
					seen[w] = true
				}
			}
			if tc.wantErr == nil && len(seen) != len(allowed) {
				t.Errorf("picks used %d workers, want all %d serving %q", len(seen), len(allowed), tc.model)
			}
		})
	}
}

// A subset hint narrows where an adapter may go, not what its base model is:
// of the hinted pods, one whose model list is incomplete may serve an
// adapter that only a pod outside the hint lists, if it lists the adapter's
// base; one whose complete list lacks the adapter does not serve it.
func TestModelFilterUnderASubsetHintKnowsTheAdaptersBase(t *testing.T) {
	reg, ws := pool(4)
	ws[0].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", "sql"), Complete: true}, Scraped: epoch})
	ws[1].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama"}, Complete: true}, Scraped: epoch})
	ws[2].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"qwen"}}, Scraped: epoch})
	ws[3].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama"}}, Scraped: epoch})
	p := build(t, Config{Name: LeastLoad}, reg, nil)
	for range 20 {
		got, err := p.Pick(&Request{Model: "sql", Subset: true}, ws[1:], 3)
		if err != nil || len(got) != 1 || got[0] != ws[3] {
			var addrs []string
			for _, w := range got {
				addrs = append(addrs, w.Address())
			}
			t.Fatalf("subset [llama pod without sql, metrics-only qwen pod, metrics-only llama pod]: Pick = %v, %v; want %s alone", addrs, err, ws[3].Address())
		}
	}
	if _, err := p.Pick(&Request{Model: "sql", Subset: true}, []*registry.Worker{ws[1]}, 1); !errors.Is(err, ErrModelNotServed) {
		t.Errorf("subset [llama pod whose complete list lacks sql]: error %v, want %v", err, ErrModelNotServed)
	}
}

// Pods of one base model started with different adapters (--lora-modules):
// vLLM answers a request for an adapter it has not registered with 404, so
// once some pod lists the adapter, a pod whose complete list lacks it is
// neither the primary nor a fallback, however busy the pods that list it.
func TestAdapterRequestsGoOnlyToPodsThatListTheAdapter(t *testing.T) {
	for _, name := range []string{CacheAware, WeightedScorer, LeastLoad} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(3)
			set := func(w *registry.Worker, adapter string) {
				w.SetMetrics(&registry.Metrics{
					Served:  &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", adapter), Complete: true},
					LoRA:    &registry.LoRA{Max: 2},
					Scraped: epoch,
				})
			}
			set(ws[0], "sql")
			set(ws[1], "chat")
			set(ws[2], "sql")
			p := build(t, Config{Name: name}, reg, nil)
			holdDecode(t, ws[0], 20)
			holdDecode(t, ws[2], 20)
			got, err := p.Pick(&Request{Model: "sql", Prompt: [][]byte{[]byte("hello")}}, ws, 3)
			if err != nil {
				t.Fatal(err)
			}
			var addrs []string
			for _, w := range got {
				addrs = append(addrs, w.Address())
			}
			slices.Sort(addrs)
			if want := []string{ws[0].Address(), ws[2].Address()}; !slices.Equal(want, addrs) {
				t.Errorf("picks for adapter sql = %v, want %v (the pods that list it; %s lists only chat)", addrs, want, ws[1].Address())
			}
		})
	}
}

// A pick for an adapter allocates nothing but its result in steady state.
func TestLoRAPickAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	reg, ws := pool(8)
	for i, w := range ws {
		loraWorker(w, epoch, 4, []string{"a", "b", "c", "d"}[i%4])
	}
	p := build(t, Config{}, reg, nil)
	req := &Request{Model: "hot", Prompt: [][]byte{text("sys", 4<<10)}}
	for range 10 {
		if _, err := p.Pick(req, ws, 3); err != nil {
			t.Fatal(err)
		}
	}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := p.Pick(req, ws, 3); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("a steady-state pick allocates %v times, want at most 1 (the result)", allocs)
	}
}

// A model server that restarted holds none of the adapters this picker
// sent to its earlier run: they must be loaded again, so the worker is no
// longer where they are loaded.
func TestLoRARecentDecisionsEndWithARestart(t *testing.T) {
	reg, ws := pool(1)
	w := ws[0]
	loraWorker(w, epoch, 2)
	a := newLoRAAffinity(reg)
	pk := func() *pick { return &pick{req: &Request{Model: "a"}} }
	a.record(pk(), w)
	if st := a.state(pk(), &candidate{w: w, metrics: w.Metrics()}); st != adapterResident {
		t.Fatalf("state after sending a = %v, want adapterResident", st)
	}
	restarted := *w.Metrics()
	restarted.Restarts++
	restarted.Scraped = epoch.Add(time.Second)
	w.SetMetrics(&restarted)
	if st := a.state(pk(), &candidate{w: w, metrics: w.Metrics()}); st != adapterFree {
		t.Errorf("state after the server restarted = %v, want adapterFree: the adapter must be loaded again", st)
	}
	// Sent again, it is loaded in the new run.
	a.record(pk(), w)
	if st := a.state(pk(), &candidate{w: w, metrics: w.Metrics()}); st != adapterResident {
		t.Errorf("state after sending a to the new run = %v, want adapterResident", st)
	}
}

// The adapters sent to a pod are that pod's alone, whatever its ID: beside
// a pod whose ID is 1,024 past its own (a picker that has seen that many
// pods come and go), a pod that was sent an adapter is where its requests
// keep going, though a little busier than the rest. A pod re-created at
// the same address is a new server that was sent nothing: the adapter is
// loaded again on the least busy pod.
func TestLoRAAffinityDistantIDs(t *testing.T) {
	for _, name := range []string{CacheAware, WeightedScorer} {
		t.Run(name, func(t *testing.T) {
			reg, ws := distantPool(2)
			for _, w := range ws {
				loraWorker(w, epoch, 4)
			}
			p := build(t, Config{Name: name, WeightedScorer: WeightedScorerConfig{QueueWeight: 1, LoRAWeight: 4}}, reg, nil)
			picks := 0
			send := func(model string, cands ...*registry.Worker) *registry.Worker {
				t.Helper()
				picks++ // a prompt of its own each time: no prefix pulls it anywhere
				got, err := p.Pick(&Request{Model: model, Prompt: [][]byte{fmt.Appendf(nil, "hello %d", picks)}}, cands, 1)
				if err != nil {
					t.Fatalf("Pick(%s): %v", model, err)
				}
				return got[0]
			}
			holder, distant := ws[0], ws[1]
			send("a", holder)  // a is loaded on the holder
			send("b", distant) // and b on the pod whose ID is 1,024 past it
			queued(holder, 1)
			for i := range 5 {
				if got := send("a", ws...); got != holder {
					t.Fatalf("pick %d of adapter a went to %s, want %s where it was loaded (ID %d; b was sent to ID %d)",
						i, got.Address(), holder.Address(), holder.ID(), distant.ID())
				}
			}

			registrytest.Remove(reg, holder.Endpoint().Key)
			again := holder.Endpoint()
			again.Key.UID += "-again"
			back := registrytest.Upsert(reg, again)
			loraWorker(back, epoch, 4)
			queued(back, 1)
			live := reg.Workers()
			got := send("a", live...)
			if got == back {
				t.Fatalf("adapter a went to the re-created pod %s, busier than the rest and never sent a", back.Address())
			}
			for i := range 5 {
				if next := send("a", live...); next != got {
					t.Fatalf("pick %d of adapter a went to %s, want %s where it was loaded again", i, next.Address(), got.Address())
				}
			}
		})
	}
}

// queued makes w's scrape report n waiting requests.
func queued(w *registry.Worker, n int) {
	m := *w.Metrics()
	m.Waiting = n
	w.SetMetrics(&m)
}
