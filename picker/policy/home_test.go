package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// replica is one picker's view of a shared pool of pods: its own registry
// (own worker objects and IDs, built in its own order) and its own policy
// with its own random source.
type replica struct {
	reg *registry.Registry
	pol Policy
	ws  map[string]*registry.Worker // by pod name
}

func newReplica(t *testing.T, seed uint64, pods []string) *replica {
	t.Helper()
	r := &replica{reg: registry.New(), ws: map[string]*registry.Worker{}}
	order := append([]string(nil), pods...)
	rand.New(rand.NewPCG(seed, 9)).Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for _, name := range order {
		r.ws[name] = registrytest.Upsert(r.reg, podEndpoint(name))
	}
	pol, err := Build(Config{}, r.reg, WithRand(rand.New(rand.NewPCG(seed, seed))), WithClock(testingclock.NewFakePassiveClock(epoch)))
	if err != nil {
		t.Fatal(err)
	}
	r.pol = pol
	return r
}

func podEndpoint(name string) registry.Endpoint {
	var i int
	if _, err := fmt.Sscanf(name, "pod-%d", &i); err != nil {
		panic(err)
	}
	return registry.Endpoint{
		Key:     registry.Key{UID: "uid-" + name, Port: 8000},
		Name:    name,
		Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 1, byte(i + 1)}), 8000),
	}
}

func podNames(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("pod-%d", i)
	}
	return out
}

// pickName picks on r's current workers and returns the primary's pod name.
func (r *replica) pickName(t *testing.T, req *Request) string {
	t.Helper()
	got, err := r.pol.Pick(req, r.reg.Workers(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return got[0].Endpoint().Name
}

// agreeOnNewPrefixes routes n new prefixes through replicas a and b,
// failing the test at the first they place apart, and counts the prefixes
// each pod got.
func agreeOnNewPrefixes(t *testing.T, a, b *replica, n int) map[string]int {
	t.Helper()
	homes := map[string]int{}
	for i := range n {
		req := chat(fmt.Sprintf("tenant %d", i), fmt.Sprintf("q %d", i), 2000, 100)
		ga, gb := a.pickName(t, req), b.pickName(t, req)
		if ga != gb {
			t.Fatalf("prefix %d: replica a picked %s, replica b %s", i, ga, gb)
		}
		homes[ga]++
	}
	return homes
}

func TestReplicasAgreeOnNewPrefixes(t *testing.T) {
	pods := podNames(6)
	homes := agreeOnNewPrefixes(t, newReplica(t, 1, pods), newReplica(t, 2, pods), 120)
	// Every pod is somebody's home: the hash spreads prefixes.
	for _, name := range pods {
		if homes[name] == 0 {
			t.Errorf("no prefix has its home on %s: %v", name, homes)
		}
	}
}

// In the first seconds of a run, with a request or two in flight here and
// there, replicas that share the pool still send a prefix none of them has
// routed to its home: the home's load bound keeps room for one request more
// than (1+ε) × the mean, which rounds to one at such loads, and the home's
// credit applies before this replica has seen any prefix recur.
func TestReplicasSendNewPrefixesHomeAtLowLoad(t *testing.T) {
	pods := podNames(8)
	a, b, ref := newReplica(t, 1, pods), newReplica(t, 2, pods), newReplica(t, 3, pods)
	for i := range 16 {
		req := chat(fmt.Sprintf("tenant %d", i), "first question", 8000, 100)
		home := ref.pickName(t, req) // an idle replica's pick of a new prefix is its home
		other := pods[0]
		if other == home {
			other = pods[1]
		}
		// Each replica has one request of its own in flight, a on the
		// home and b elsewhere; each sees the other's in the servers'
		// figures.
		ga, gb := a.ws[home].Admit(), b.ws[other].Admit()
		a.ws[home].SetMetrics(&registry.Metrics{Running: 1, Own: 1, Scraped: epoch})
		a.ws[other].SetMetrics(&registry.Metrics{Running: 1, Scraped: epoch})
		b.ws[home].SetMetrics(&registry.Metrics{Running: 1, Scraped: epoch})
		b.ws[other].SetMetrics(&registry.Metrics{Running: 1, Own: 1, Scraped: epoch})
		if got := a.pickName(t, req); got != home {
			t.Errorf("prefix %d: replica a picked %s, not its home %s", i, got, home)
		}
		if got := b.pickName(t, req); got != home {
			t.Errorf("prefix %d: replica b picked %s, not its home %s", i, got, home)
		}
		ga.Release()
		gb.Release()
		for _, r := range []*replica{a, b} {
			r.ws[home].SetMetrics(nil)
			r.ws[other].SetMetrics(nil)
		}
	}
}

func TestHomeChurnMovesOnlyPrefixesOfTheLeavingWorker(t *testing.T) {
	pods := podNames(5)
	before := newReplica(t, 1, pods)
	const n = 200
	homes := make([]string, n)
	req := func(i int) *Request { return chat(fmt.Sprintf("doc %d", i), "q", 1024, 64) }
	for i := range homes {
		homes[i] = before.pickName(t, req(i))
	}
	// A replica that never saw these prompts, after pod-2 left.
	after := newReplica(t, 7, append(pods[:2:2], pods[3:]...))
	moved := 0
	for i := range homes {
		got := after.pickName(t, req(i))
		switch {
		case homes[i] != "pod-2" && got != homes[i]:
			t.Errorf("prompt %d moved from %s to %s though its home stayed", i, homes[i], got)
		case homes[i] == "pod-2":
			moved++
		}
	}
	if moved == 0 {
		t.Fatalf("no prompt had its home on pod-2")
	}
}

func TestHomeOverflowsInTheSameOrderOnEveryReplica(t *testing.T) {
	pods := podNames(4)
	a, b := newReplica(t, 1, pods), newReplica(t, 2, pods)
	req := chat("tenant", "q", 2000, 100)
	home := newReplica(t, 3, pods).pickName(t, req)

	// Replica a sends 6 requests to the home; replica b sees them only in
	// the model server's figures.
	admit(t, a.ws[home], 6)
	b.ws[home].SetMetrics(&registry.Metrics{Running: 6, Scraped: epoch})
	ga, gb := a.pickName(t, req), b.pickName(t, req)
	if ga == home {
		t.Fatalf("the overloaded home %s still took the prompt", home)
	}
	if ga != gb {
		t.Errorf("overflow: replica a picked %s, replica b %s", ga, gb)
	}
}

func TestLearnedPrefixStaysWhereItWasLearned(t *testing.T) {
	pods := podNames(4)
	r := newReplica(t, 1, pods)
	sys := "shared system prompt"
	home := newReplica(t, 2, pods).pickName(t, chat(sys, "first", 4000, 100))

	// The home is busy when the prefix first arrives: it goes elsewhere.
	var busy []*registry.Guard
	for range 8 {
		busy = append(busy, r.ws[home].Admit())
	}
	first := r.pickName(t, chat(sys, "first", 4000, 100))
	if first == home {
		t.Fatalf("the busy home %s took the prefix", home)
	}
	for _, g := range busy {
		g.Release()
	}
	// Idle again, the home does not take the prefix back from where this
	// replica learned it.
	for i := range 5 {
		if got := r.pickName(t, chat(sys, fmt.Sprintf("q %d", i), 4000, 100)); got != first {
			t.Errorf("question %d went to %s, not %s where the prefix was learned", i, got, first)
		}
	}
}

func TestLoadCountsOthersOnce(t *testing.T) {
	cfg := Config{}.Default()
	e := &engine{cfg: cfg}
	for name, tc := range map[string]struct {
		prefill, decode int
		m               *registry.Metrics
		r               float64
		want            float64
	}{
		"own only, no metrics": {prefill: 1, decode: 2, want: 2*1 + 2},
		"server shows only ours": {prefill: 1, decode: 2,
			m: &registry.Metrics{Running: 3, Own: 3, OwnPrefill: 1}, want: 2*1 + 2},
		"others running": {prefill: 0, decode: 1,
			m: &registry.Metrics{Running: 4, Own: 1}, want: 1 + 3},
		"others queued weigh as prefill": {prefill: 1, decode: 0,
			m: &registry.Metrics{Running: 1, Waiting: 3, Own: 1, OwnPrefill: 1}, want: 2*1 + 2*2 + 1},
		"ours finished since the scrape: not counted as theirs": {prefill: 0, decode: 0,
			m: &registry.Metrics{Running: 2, Own: 2}, want: 0},
		"more of ours than the server showed: never negative": {prefill: 3, decode: 2,
			m: &registry.Metrics{Running: 1, Own: 5}, want: 2*3 + 2},
		"others grow with ours since the scrape": {prefill: 2, decode: 0,
			m: &registry.Metrics{Running: 4, Own: 0}, r: 2, want: 2*2 + 4 + 2*(2*2)},
		"others shrink with ours since the scrape": {prefill: 0, decode: 1,
			m: &registry.Metrics{Running: 6, Own: 2}, r: 1, want: 1 + (4 - 1)},
	} {
		t.Run(name, func(t *testing.T) {
			_, ws := pool(1)
			for i := range tc.prefill + tc.decode {
				g := ws[0].Admit()
				t.Cleanup(func() { g.Release() })
				if i < tc.decode {
					g.FirstToken()
				}
			}
			if diff := cmp.Diff(tc.want, e.load(ws[0], tc.m, tc.r)); diff != "" {
				t.Errorf("load (-want +got):\n%s", diff)
			}
		})
	}
}

func TestOthersPerOwn(t *testing.T) {
	for name, tc := range map[string]struct {
		ms   []*registry.Metrics
		want float64
	}{
		"lone picker":     {ms: []*registry.Metrics{{Running: 2, Own: 2}, {Running: 1, Own: 1}}, want: 0},
		"two others":      {ms: []*registry.Metrics{{Running: 6, Own: 2}, {Running: 3, Own: 1}}, want: 2},
		"nothing of ours": {ms: []*registry.Metrics{{Running: 6}}, want: 0},
		"stale ones left": {ms: []*registry.Metrics{nil, {Running: 4, Own: 2}}, want: 1},
		"bounded":         {ms: []*registry.Metrics{{Running: 1000, Own: 1}}, want: maxOthersPerOwn},
	} {
		t.Run(name, func(t *testing.T) {
			var cs []candidate
			for _, m := range tc.ms {
				cs = append(cs, candidate{metrics: m})
			}
			got, measured := othersPerOwn(cs)
			if got != tc.want || measured != (name != "nothing of ours") {
				t.Errorf("othersPerOwn = %v, %v; want %v, %v", got, measured, tc.want, name != "nothing of ours")
			}
		})
	}
}

// A picker whose servers' figures show no one else's requests spreads new
// conversations over the pods with the fewest parked: sixteen of them over
// eight idle pods put two on each, where the prefixes' homes alone would
// pile some on one pod and leave another empty. (Until figures show it
// alone, a picker keeps to the homes, as replicas must: see
// TestReplicasSendNewPrefixesHomeAtLowLoad.)
func TestAlonePickerSpreadsNewConversations(t *testing.T) {
	pods := podNames(8)
	conv := func(i int) *Request { return chat(fmt.Sprintf("conversation %d", i), "first turn", 4000, 300) }

	// The figures show this picker's one request on every pod and no one
	// else's: every pod is as idle as the next.
	alone := newReplica(t, 3, pods)
	for _, w := range alone.ws {
		w.SetMetrics(&registry.Metrics{Running: 1, Own: 1, Scraped: epoch})
	}
	warm := chat("a conversation already going", "next turn", 4000, 300)
	for range 24 { // its turns go where it is cached, and measure the others' share
		alone.pickName(t, warm)
	}
	per := map[string]int{alone.pickName(t, warm): 1}
	for i := range 15 {
		per[alone.pickName(t, conv(i))]++
	}
	want := map[string]int{}
	for _, p := range pods {
		want[p] = 2
	}
	if diff := cmp.Diff(want, per); diff != "" {
		t.Errorf("conversations per pod (-want +got):\n%s", diff)
	}

	// Deployed as the only picker, it spreads them from the first request,
	// before any figures.
	reg := registry.New()
	for _, p := range pods {
		registrytest.Upsert(reg, podEndpoint(p))
	}
	pol, err := Build(Config{CacheAware: CacheAwareConfig{Replicas: 1}}, reg, WithClock(testingclock.NewFakePassiveClock(epoch)))
	if err != nil {
		t.Fatal(err)
	}
	per = map[string]int{}
	for i := range 16 {
		got, err := pol.Pick(conv(i), reg.Workers(), 1)
		if err != nil {
			t.Fatal(err)
		}
		per[got[0].Endpoint().Name]++
	}
	if diff := cmp.Diff(want, per); diff != "" {
		t.Errorf("conversations per pod of a lone picker, before any figures (-want +got):\n%s", diff)
	}
}
