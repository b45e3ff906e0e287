package policy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
	"github.com/inferpick/inferpick/picker/session"
)

// idAffinity is session affinity on session ids, pinned.
func idAffinity() *SessionAffinityConfig {
	return &SessionAffinityConfig{Key: SessionID}
}

// podOf is the name of w's pod.
func podOf(w *registry.Worker) string {
	_, name := w.Pod()
	return name
}

// idOn returns a session id that goes to the pod named name among ws,
// as an idle pool pinned on ids places it.
func idOn(t *testing.T, ws []*registry.Worker, name string) session.ID {
	t.Helper()
	reg := registry.New()
	for _, w := range ws {
		registrytest.Upsert(reg, w.Endpoint())
	}
	p := build(t, Config{Name: LeastLoad, SessionAffinity: idAffinity()}, reg, nil)
	for i := range 1000 {
		id := session.Of(fmt.Sprint("session-", i))
		got, err := p.Pick(&Request{SessionID: id}, reg.Workers(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if podOf(got[0]) == name {
			return id
		}
	}
	t.Fatalf("no session id of 1000 goes to %s", name)
	return session.ID{}
}

// namedPool is a pool of n pods of one port each, named.
func namedPool(n int) *registry.Registry {
	reg := registry.New()
	for i := range n {
		registrytest.Upsert(reg, registry.Endpoint{
			Key: registry.Key{UID: fmt.Sprint("uid-", i), Port: 8000}, Namespace: "ns", Name: fmt.Sprint("pod-", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i + 1)}), 8000),
		})
	}
	return reg
}

// A session id goes to one pod, pick after pick, whatever the policy and
// the load each replica sees: two replicas built alike, each with its own
// view of the load, send every id to the same pod.
func TestSessionIDSamePodOnEveryReplica(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			regA, wsA := pool(8)
			regB, wsB := pool(8)
			for i := range wsA {
				admit(t, wsA[i], i%3)   // replica A's view of the load
				admit(t, wsB[i], 2-i%3) // replica B's, the other way round
			}
			cfg := Config{Name: name, SessionAffinity: idAffinity()}
			a, b := build(t, cfg, regA, nil), build(t, cfg, regB, nil)
			pods := map[string]bool{}
			for i := range 100 {
				id := session.Of(fmt.Sprint("agent-", i))
				want := ""
				for j := range 4 {
					for r, p := range map[string]Policy{"A": a, "B": b} {
						ws := wsA
						if r == "B" {
							ws = wsB
						}
						got, err := p.Pick(&Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("p", i, j), 512)}, SessionID: id}, ws, 2)
						if err != nil {
							t.Fatal(err)
						}
						if want == "" {
							want = podOf(got[0])
						}
						if podOf(got[0]) != want {
							t.Fatalf("id %d, pick %d on replica %s: pod %s, want %s", i, j, r, podOf(got[0]), want)
						}
						if len(got) != 2 || podOf(got[1]) == want {
							t.Fatalf("id %d, pick %d on replica %s: fallbacks %v, want another pod", i, j, r, addresses(got[1:]))
						}
					}
				}
				pods[want] = true
			}
			if len(pods) < 6 {
				t.Errorf("100 ids went to %d of 8 pods", len(pods))
			}
		})
	}
}

// A pod that leaves the pool moves only the ids that were its own; the ids
// spread over the pods about evenly.
func TestSessionIDPodLeavingMovesOnlyItsIDs(t *testing.T) {
	const pods, ids = 8, 1000
	reg, ws := pool(pods)
	p := build(t, Config{Name: LeastLoad, SessionAffinity: idAffinity()}, reg, nil)
	placed := func() []string {
		out := make([]string, ids)
		for i := range out {
			got, err := p.Pick(&Request{SessionID: session.Of(fmt.Sprint("conversation-", i))}, reg.Workers(), 1)
			if err != nil {
				t.Fatal(err)
			}
			out[i] = podOf(got[0])
		}
		return out
	}
	before := placed()
	count := map[string]int{}
	for _, pod := range before {
		count[pod]++
	}
	for _, w := range ws {
		if n := count[podOf(w)]; n < ids/pods*6/10 || n > ids/pods*14/10 {
			t.Errorf("%s holds %d of %d ids, want within 40%% of %d", podOf(w), n, ids, ids/pods)
		}
	}
	gone := podOf(ws[3])
	registrytest.Remove(reg, ws[3].Endpoint().Key)
	after := placed()
	moved := 0
	for i := range before {
		switch {
		case before[i] != gone && after[i] != before[i]:
			t.Errorf("id %d moved from %s to %s, though its pod stayed", i, before[i], after[i])
		case before[i] == gone:
			moved++
			if after[i] == gone {
				t.Errorf("id %d still goes to the removed %s", i, gone)
			}
		}
	}
	if diff := cmp.Diff(count[gone], moved); diff != "" {
		t.Errorf("ids moved (-want +got):\n%s", diff)
	}
}

// Without a usable pod for its id, a request is picked as usual: the
// least-load policy takes the idle pod.
func TestSessionIDFallsBackToTheUsualPick(t *testing.T) {
	_, ws := pool(3)
	onPod1 := idOn(t, ws, "pod-1")
	for name, tc := range map[string]struct {
		cfg Config
		id  session.ID
	}{
		"no id":                      {cfg: Config{SessionAffinity: idAffinity()}},
		"an empty id":                {cfg: Config{SessionAffinity: idAffinity()}, id: session.Of("")},
		"the pod is saturated":       {cfg: Config{MaxInFlight: 3, SessionAffinity: idAffinity()}, id: onPod1},
		"session affinity is off":    {id: onPod1},
		"session affinity on tokens": {cfg: Config{SessionAffinity: &SessionAffinityConfig{}}, id: onPod1},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(3)
			admit(t, ws[0], 2)
			admit(t, ws[1], 3)
			cfg := tc.cfg
			cfg.Name = LeastLoad
			p := build(t, cfg, reg, nil)
			got, err := p.Pick(&Request{Model: "m", SessionID: tc.id}, ws, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ws[2].Address(), got[0].Address()); diff != "" {
				t.Errorf("primary (-want +got):\n%s", diff)
			}
		})
	}
}

// An id is hashed to a pod, not a port: of a pod with several target
// ports, the policy picks the port.
func TestSessionIDChoosesAmongThePodsPorts(t *testing.T) {
	reg, ws := twoPortPods(4)
	p := build(t, Config{Name: LeastLoad, SessionAffinity: idAffinity()}, reg, nil)
	for i := range 50 {
		id := session.Of(fmt.Sprint("s", i))
		first, err := p.Pick(&Request{SessionID: id}, ws, 1)
		if err != nil {
			t.Fatal(err)
		}
		g := first[0].Admit() // that port is now the busier of its pod's
		got, err := p.Pick(&Request{SessionID: id}, ws, 1)
		g.Release()
		if err != nil {
			t.Fatal(err)
		}
		if podOf(got[0]) != podOf(first[0]) || got[0] == first[0] {
			t.Fatalf("id %d: %s, then %s with it busy; want the pod's other port", i, first[0].Address(), got[0].Address())
		}
	}
}

// Over a large pool the cache-aware policy looks at a sample of it; an
// id's pod outside the sample is found, and every replica agrees on it.
func TestSessionIDOverALargePool(t *testing.T) {
	regA, regB := namedPool(3*sampleAbove), namedPool(3*sampleAbove)
	a := build(t, Config{SessionAffinity: idAffinity()}, regA, nil)
	b := build(t, Config{SessionAffinity: idAffinity()}, regB, nil)
	for i := range 20 {
		req := func() *Request {
			return &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("p", i), 512)}, SessionID: session.Of(fmt.Sprint("id-", i))}
		}
		gotA, err := a.Pick(req(), regA.Workers(), 1)
		if err != nil {
			t.Fatal(err)
		}
		gotB, err := b.Pick(req(), regB.Workers(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if gotA[0].Address() != gotB[0].Address() {
			t.Fatalf("id %d: replica A picked %s, replica B %s", i, gotA[0].Address(), gotB[0].Address())
		}
	}
}

// With mode prefer the id's pod scores sessionWeight more.
func TestSessionIDPreferWeighsItsPod(t *testing.T) {
	for name, tc := range map[string]struct {
		weight float64
		want   int // the primary's index
	}{
		"outweighs the queue": {weight: 3, want: 1},
		"outweighed":          {weight: 0.5, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(2)
			id := idOn(t, ws, "pod-1")
			ws[0].SetMetrics(&registry.Metrics{Waiting: 0, KVUsage: 0.1, Scraped: epoch})
			ws[1].SetMetrics(&registry.Metrics{Waiting: 4, KVUsage: 0.1, Scraped: epoch})
			p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: 2, SessionWeight: tc.weight},
				SessionAffinity: &SessionAffinityConfig{Key: SessionID, Mode: SessionPrefer}}, reg, nil)
			got, err := p.Pick(&Request{Model: "m", SessionID: id}, ws, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ws[tc.want].Address(), got[0].Address()); diff != "" {
				t.Errorf("primary (-want +got):\n%s", diff)
			}
		})
	}
}

// A pick pinned by an id, over a large pool whose sample may leave its pod
// out, allocates nothing but its result.
func TestSessionIDAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	reg := namedPool(2 * sampleAbove)
	p := build(t, Config{SessionAffinity: idAffinity()}, reg, nil)
	req := &Request{Model: "m", Prompt: [][]byte{text("sys", 4<<10)}, SessionID: session.Of("an agent's session")}
	want := ""
	run := func() {
		got, err := p.Pick(req, reg.Workers(), 3)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			want = got[0].Address()
		}
		if got[0].Address() != want {
			t.Fatalf("picked %s, then %s", want, got[0].Address())
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(100, run); allocs > 1 {
		t.Errorf("a pick pinned by an id allocates %v times, want at most 1 (the result)", allocs)
	}
}

// The session header defaults by what it carries: llm-d's header for each.
func TestSessionAffinityDefaultHeader(t *testing.T) {
	for name, tc := range map[string]struct {
		in   SessionAffinityConfig
		want SessionAffinityConfig
	}{
		"token":        {in: SessionAffinityConfig{}, want: SessionAffinityConfig{Header: "x-session-token", Key: SessionToken, Mode: SessionPin}},
		"id":           {in: SessionAffinityConfig{Key: SessionID}, want: SessionAffinityConfig{Header: "x-session-id", Key: SessionID, Mode: SessionPin}},
		"id, a header": {in: SessionAffinityConfig{Key: SessionID, Header: "X-Agent"}, want: SessionAffinityConfig{Header: "x-agent", Key: SessionID, Mode: SessionPin}},
	} {
		t.Run(name, func(t *testing.T) {
			in := tc.in
			got := Config{SessionAffinity: &in}.Default().SessionAffinity
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("defaulted (-want +got):\n%s", diff)
			}
		})
	}
}
