package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// epoch is the fixed time of the injected clock.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// clock is a settable clock for WithClock.
type clock struct{ t time.Time }

func (c *clock) Now() time.Time { return c.t }

func (c *clock) Since(t time.Time) time.Duration { return c.t.Sub(t) }

// pool builds a registry of n workers on loopback addresses.
func pool(n int) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	ws := make([]*registry.Worker, n)
	for i := range ws {
		ws[i] = registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Name:    fmt.Sprintf("pod-%d", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), 8000),
		})
	}
	return reg, ws
}

// build returns the configured policy with a seeded random source and clk.
func build(t *testing.T, cfg Config, reg *registry.Registry, clk *clock) Policy {
	t.Helper()
	if clk == nil {
		clk = &clock{t: epoch}
	}
	p, err := Build(cfg, reg, WithRand(rand.New(rand.NewPCG(1, 2))), WithClock(clk))
	if err != nil {
		t.Fatalf("Build(%+v): %v", cfg, err)
	}
	return p
}

// admit holds n requests in prefill on w until the test ends.
func admit(t *testing.T, w *registry.Worker, n int) {
	for range n {
		g := w.Admit()
		t.Cleanup(func() { g.Release() })
	}
}

// text returns size deterministic bytes, distinct for each tag.
func text(tag string, size int) []byte {
	b := make([]byte, size)
	seed := uint64(0)
	for _, c := range tag {
		seed = seed*131 + uint64(c)
	}
	r := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte('a' + r.IntN(26))
	}
	return b
}

// chat is a request whose prompt is a shared system part and a user part.
func chat(system, user string, systemBytes, userBytes int) *Request {
	return &Request{Model: "m", Prompt: [][]byte{text(system, systemBytes), text(user, userBytes)}}
}

// counts tallies picks by worker address.
func counts(t *testing.T, p Policy, cands []*registry.Worker, picks int, req func(i int) *Request) map[string]int {
	t.Helper()
	got := map[string]int{}
	for i := range picks {
		ws, err := p.Pick(req(i), cands, 1)
		if err != nil {
			t.Fatalf("pick %d: %v", i, err)
		}
		got[ws[0].Address()]++
	}
	return got
}

var allPolicies = []string{CacheAware, LeastLoad, RoundRobin, Random, PowerOfTwo, WeightedScorer}

// bigPool is pool for more than 254 workers.
func bigPool(n int) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	ws := make([]*registry.Worker, n)
	for i := range ws {
		ws[i] = registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i + 1)}), 8000),
		})
	}
	return reg, ws
}

// distantPool builds a registry whose pods come and go until one's ID is
// 1,024 past the first's (a picker that has seen that many pods come and
// go): it returns the first, that one and extra more, all live.
func distantPool(extra int) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	add := func(i int) *registry.Worker {
		return registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}), 8000),
		})
	}
	first := add(0)
	for i := 1; ; i++ {
		w := add(i)
		if w.ID()%1024 == first.ID()%1024 {
			ws := []*registry.Worker{first, w}
			for j := range extra {
				ws = append(ws, add(i+1+j))
			}
			return reg, ws
		}
		registrytest.Remove(reg, w.Endpoint().Key)
	}
}
