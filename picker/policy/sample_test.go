package policy

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// largePool is the pool size of these tests: well past sampleAbove.
const largePool = 1000

// largeReplica is newReplica for a pool of largePool pods, in an order of
// its own.
func largeReplica(t *testing.T, seed uint64, cfg Config) *replica {
	t.Helper()
	r := &replica{reg: registry.New(), ws: map[string]*registry.Worker{}}
	order := rand.New(rand.NewPCG(seed, 9)).Perm(largePool)
	for _, i := range order {
		name := fmt.Sprintf("pod-%d", i)
		r.ws[name] = registrytest.Upsert(r.reg, registry.Endpoint{
			Key:     registry.Key{UID: "uid-" + name, Port: 8000},
			Name:    name,
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), 8000),
		})
	}
	pol, err := Build(cfg, r.reg, WithRand(rand.New(rand.NewPCG(seed, seed))), WithClock(testingclock.NewFakePassiveClock(epoch)))
	if err != nil {
		t.Fatal(err)
	}
	r.pol = pol
	return r
}

// A prompt routed once is found again on a large pool, though its worker
// is rarely in the pick's random sample: the index names it.
func TestLargePoolFindsWhereAPromptIsCached(t *testing.T) {
	r := largeReplica(t, 1, Config{})
	for i := range 50 {
		req := chat(fmt.Sprintf("tenant %d", i), "first question", 8000, 100)
		first := r.pickName(t, req)
		for j := range 5 {
			again := chat(fmt.Sprintf("tenant %d", i), fmt.Sprintf("question %d", j), 8000, 100)
			if got := r.pickName(t, again); got != first {
				t.Fatalf("prefix %d, question %d: picked %s, the prefix is cached on %s", i, j, got, first)
			}
		}
	}
}

// Replicas that share nothing still agree on a new prefix's home over a
// large pool (the home is ranked over every worker, not over the sample),
// and the homes spread over the pool.
func TestLargePoolReplicasAgreeOnNewPrefixes(t *testing.T) {
	homes := agreeOnNewPrefixes(t, largeReplica(t, 1, Config{}), largeReplica(t, 2, Config{}), 200)
	if len(homes) < 150 {
		t.Errorf("200 prefixes have %d distinct homes on %d pods", len(homes), largePool)
	}
}

// With half the pool busy, new prompts go to idle workers: the best of the
// sample, never a busy worker.
func TestLargePoolAvoidsBusyWorkers(t *testing.T) {
	r := largeReplica(t, 1, Config{})
	busy := map[string]bool{}
	for name, w := range r.ws {
		var i int
		if _, err := fmt.Sscanf(name, "pod-%d", &i); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			admit(t, w, 4)
			busy[name] = true
		}
	}
	for i := range 200 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 2000, 100)
		if got := r.pickName(t, req); busy[got] {
			t.Fatalf("prefix %d went to %s, which holds 4 requests, with half the pool idle", i, got)
		}
	}
}

// When every worker of the sample is at the in-flight cap, the pick looks
// at the whole pool: the one worker with room gets the request.
func TestLargePoolSaturatedSampleScansThePool(t *testing.T) {
	r := largeReplica(t, 1, Config{MaxInFlight: 1})
	free := "pod-617"
	for name, w := range r.ws {
		if name != free {
			admit(t, w, 1)
		}
	}
	for i := range 20 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 2000, 100)
		if got := r.pickName(t, req); got != free {
			t.Fatalf("pick %d: %s, want the only worker with room, %s", i, got, free)
		}
	}
	g := r.ws[free].Admit()
	defer g.Release()
	if _, err := r.pol.Pick(chat("t", "q", 2000, 100), r.reg.Workers(), 1); !errors.Is(err, ErrSaturated) {
		t.Fatalf("a pick on a full pool returned %v, want ErrSaturated", err)
	}
}

// With Request.Overflow, a sample whose every worker is past the queue and
// KV-cache thresholds does not settle the pick: the pool is scanned for a
// worker under them, and only a pool with none is picked from as it is.
func TestLargePoolOverflowScansThePoolFirst(t *testing.T) {
	r := largeReplica(t, 1, Config{})
	free := "pod-617"
	for name, w := range r.ws {
		if name != free {
			w.SetMetrics(&registry.Metrics{Waiting: 5, KVUsage: 0.8, Scraped: epoch})
		}
	}
	for i := range 20 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 2000, 100)
		req.Overflow = true
		if got := r.pickName(t, req); got != free {
			t.Fatalf("pick %d: %s, want the only worker under the thresholds, %s", i, got, free)
		}
	}
	r.ws[free].SetMetrics(&registry.Metrics{Waiting: 5, KVUsage: 0.8, Scraped: epoch})
	req := chat("t", "q", 2000, 100)
	req.Overflow = true
	if got, err := r.pol.Pick(req, r.reg.Workers(), 1); err != nil || len(got) != 1 {
		t.Fatalf("an overflowing pick on a pool past the thresholds returned %v, %v; want one worker", got, err)
	}
	if _, err := r.pol.Pick(chat("t", "q", 2000, 100), r.reg.Workers(), 1); !errors.Is(err, ErrSaturated) {
		t.Fatalf("a pick without overflow on a pool past the thresholds returned %v, want ErrSaturated", err)
	}
}

// A subset the caller narrowed is looked at whole: the only idle worker of
// a subset of 300 busy ones is always found.
func TestSubsetPickLooksAtEveryCandidate(t *testing.T) {
	r := largeReplica(t, 1, Config{})
	subset := make([]*registry.Worker, 0, 300)
	for i := range 300 {
		w := r.ws[fmt.Sprintf("pod-%d", i)]
		if i != 211 {
			admit(t, w, 3)
		}
		subset = append(subset, w)
	}
	for i := range 50 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 2000, 100)
		req.Subset = true
		got, err := r.pol.Pick(req, subset, 1)
		if err != nil {
			t.Fatal(err)
		}
		if name := got[0].Endpoint().Name; name != "pod-211" {
			t.Fatalf("pick %d: %s, want the subset's only idle worker pod-211", i, name)
		}
	}
}

// An adapter goes back to a worker it was sent to, where it is loaded,
// rather than to a worker of the sample that would have to load it.
func TestLargePoolKeepsAnAdapterWhereItIsLoaded(t *testing.T) {
	r := largeReplica(t, 1, Config{MetricsStaleness: Duration{time.Hour}})
	served := &registry.Served{Bases: []string{"llama"}, Adapters: adaptersOf("llama", "chat-lora", "sql-lora"), Complete: true}
	for _, w := range r.ws {
		w.SetMetrics(&registry.Metrics{Served: served, Scraped: epoch, LoRA: &registry.LoRA{Max: 2}})
	}
	first := ""
	for i := range 40 {
		// Distinct prompts, so that only the adapter ties them together.
		req := &Request{Model: "sql-lora", Prompt: [][]byte{text(fmt.Sprint("prompt", i), 2000)}}
		got := r.pickName(t, req)
		if first == "" {
			first = got
		}
		if got != first {
			t.Fatalf("request %d for the adapter went to %s; it is loaded on %s", i, got, first)
		}
	}
}

// The model filter a pick keeps for a candidate list follows the workers'
// model lists: a model no worker served is routed as soon as one lists
// it, and no longer once that worker is gone.
func TestModelFilterFollowsModelLists(t *testing.T) {
	reg, ws := pool(4)
	p := build(t, Config{MetricsStaleness: Duration{time.Hour}}, reg, nil)
	llama := &registry.Served{Bases: []string{"llama"}, Complete: true}
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Served: llama, Scraped: epoch})
	}
	req := &Request{Model: "qwen", Prompt: [][]byte{[]byte("hello")}}
	if _, err := p.Pick(req, reg.Workers(), 1); !errors.Is(err, ErrModelNotServed) {
		t.Fatalf("qwen before any worker lists it: %v, want ErrModelNotServed", err)
	}
	ws[2].SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama", "qwen"}, Complete: true}, Scraped: epoch})
	for range 5 {
		got, err := p.Pick(req, reg.Workers(), 1)
		if err != nil || got[0] != ws[2] {
			t.Fatalf("qwen once %s lists it: %v %v", ws[2].Address(), got, err)
		}
	}
	cands := reg.Workers()
	reg.Update(nil, []registry.Key{ws[2].Endpoint().Key})
	if _, err := p.Pick(req, cands, 1); !errors.Is(err, ErrModelNotServed) {
		t.Fatalf("qwen after its only worker left, on the list from before: %v, want ErrModelNotServed", err)
	}
}

// largeRolePool is a registry of n pods labelled role and others labelled
// other, and the policy cfg built over it.
func largeRolePool(t *testing.T, cfg Config, role string, n int, other string, others int) (*registry.Registry, Policy) {
	t.Helper()
	reg := registry.New()
	for i := range n + others {
		label := role
		if i >= n {
			label = other
		}
		name := fmt.Sprintf("%s-%d", label, i)
		registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: "uid-" + name, Port: 8000},
			Name:    name,
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 2, byte(i >> 8), byte(i)}), 8000),
			Role:    registry.ParseRole(label, true),
		})
	}
	pol, err := Build(cfg, reg, WithRand(rand.New(rand.NewPCG(3, 4))), WithClock(testingclock.NewFakePassiveClock(epoch)))
	if err != nil {
		t.Fatal(err)
	}
	return reg, pol
}

// A decode pick over a large pool's decode pods never returns the prefill
// pod, though it holds the prompt (an earlier prefill pick placed it
// there) and the decode pod that holds it too is loaded: the pick samples
// among its candidates alone.
func TestLargePoolDecodePickStaysOnDecoders(t *testing.T) {
	reg, pol := largeRolePool(t, Config{}, "decode", 150, "prefill", 1)
	for i := range 20 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 8000, 100)
		got, err := pol.Pick(req, reg.Decoders(), 1)
		if err != nil {
			t.Fatal(err)
		}
		decode := got[0]
		pre := *req
		pre.Exclude = decode
		if _, err := pol.Pick(&pre, reg.Prefillers(), 1); err != nil {
			t.Fatal(err)
		}
		admit(t, decode, 2)
		got, err = pol.Pick(req, reg.Decoders(), 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range got {
			if !w.Role().Decodes() {
				t.Fatalf("prompt %d: a decode pick returned %s, which only prefills", i, w.Endpoint().Name)
			}
		}
	}
}

// A prefill pick over a large pool's prefill pods never returns a decode
// pod that holds the prompt (decoded there before) when the request is
// decoded elsewhere.
func TestLargePoolPrefillPickStaysOnPrefillers(t *testing.T) {
	reg, pol := largeRolePool(t, Config{}, "prefill", 150, "decode", 2)
	decoders := reg.Decoders()
	for i := range 20 {
		req := chat(fmt.Sprintf("tenant %d", i), "q", 8000, 100)
		got, err := pol.Pick(req, decoders, 1)
		if err != nil {
			t.Fatal(err)
		}
		pre := *req
		pre.Exclude = decoders[0]
		if got[0] == decoders[0] {
			pre.Exclude = decoders[1]
		}
		got, err = pol.Pick(&pre, reg.Prefillers(), 3)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range got {
			if !w.Role().Prefills() {
				t.Fatalf("prompt %d: a prefill pick returned %s, which only decodes", i, w.Endpoint().Name)
			}
		}
	}
}
