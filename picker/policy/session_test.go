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

// token is the decoded session token of the pod ns/name.
func token(ns, name string) *session.Ref {
	var r session.Ref
	r.Set(ns, name)
	return &r
}

// A pinned session goes to its pod whatever the policy, though that pod
// is the busiest; the fallbacks are the other pods, picked as usual.
func TestSessionPinKeepsTheSessionOnItsPod(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(4)
			admit(t, ws[2], 6) // the session's pod is the busiest
			p := build(t, Config{Name: name, SessionAffinity: &SessionAffinityConfig{}}, reg, nil)
			for i := range 8 {
				got, err := p.Pick(&Request{Model: "m", Session: token("", "pod-2")}, ws, 3)
				if err != nil {
					t.Fatal(err)
				}
				if got[0] != ws[2] {
					t.Fatalf("pick %d: primary %s, want the session's pod %s", i, got[0].Address(), ws[2].Address())
				}
				if len(got) != 3 || got[1] == ws[2] || got[2] == ws[2] || got[1] == got[2] {
					t.Fatalf("pick %d: fallbacks %v, want two other distinct pods", i, addresses(got[1:]))
				}
			}
		})
	}
}

// Without a usable session pod the pick is the policy's own, with no
// error: the least-load policy takes the idle pod.
func TestSessionPinFallsBackToTheUsualPick(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg     Config
		session *session.Ref
		prepare func(t *testing.T, reg *registry.Registry, ws []*registry.Worker) []*registry.Worker // returns the candidates
	}{
		"no token":                   {},
		"a pod of another namespace": {session: token("other", "pod-1")},
		"an unknown pod":             {session: token("", "pod-9")},
		"the pod is parked": {session: token("", "pod-1"), prepare: func(_ *testing.T, reg *registry.Registry, ws []*registry.Worker) []*registry.Worker {
			ep := ws[1].Endpoint()
			ep.Unready = true
			reg.Update([]registry.Endpoint{ep}, nil)
			return ws
		}},
		"the pod is gone": {session: token("", "pod-1"), prepare: func(_ *testing.T, reg *registry.Registry, ws []*registry.Worker) []*registry.Worker {
			registrytest.Remove(reg, ws[1].Endpoint().Key)
			return ws
		}},
		"the pod is outside the candidates": {session: token("", "pod-1"), prepare: func(_ *testing.T, _ *registry.Registry, ws []*registry.Worker) []*registry.Worker {
			return []*registry.Worker{ws[0], ws[2]}
		}},
		"the pod is saturated for the request": {cfg: Config{MaxInFlight: 3}, session: token("", "pod-1"),
			prepare: func(t *testing.T, _ *registry.Registry, ws []*registry.Worker) []*registry.Worker {
				admit(t, ws[1], 3)
				return ws
			}},
		"the pod does not serve the model": {session: token("", "pod-1"),
			prepare: func(_ *testing.T, _ *registry.Registry, ws []*registry.Worker) []*registry.Worker {
				for i, w := range ws {
					model := "m"
					if i == 1 {
						model = "other"
					}
					w.SetMetrics(&registry.Metrics{Scraped: epoch, Served: &registry.Served{Complete: true, Bases: []string{model}}})
				}
				return ws
			}},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(3)
			admit(t, ws[0], 2)
			admit(t, ws[1], 1) // the session's pod, when it is one
			cands := ws
			if tc.prepare != nil {
				cands = tc.prepare(t, reg, ws)
			}
			cfg := tc.cfg
			cfg.Name, cfg.SessionAffinity = LeastLoad, &SessionAffinityConfig{}
			p := build(t, cfg, reg, nil)
			got, err := p.Pick(&Request{Model: "m", Session: tc.session}, cands, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ws[2].Address(), got[0].Address()); diff != "" {
				t.Errorf("primary (-want +got):\n%s", diff)
			}
		})
	}
}

// The token names a pod; of a pod with several target ports, the policy
// picks the port.
func TestSessionPinChoosesAmongThePodsPorts(t *testing.T) {
	reg, ws := twoPortPods(2)
	// ws: pod-0:8000, pod-0:8001, pod-1:8000, pod-1:8001
	admit(t, ws[0], 1)
	admit(t, ws[1], 1)
	admit(t, ws[2], 4)
	p := build(t, Config{Name: LeastLoad, SessionAffinity: &SessionAffinityConfig{}}, reg, nil)
	got, err := p.Pick(&Request{Session: token("ns", "pod-1")}, ws, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{ws[3].Address(), ws[0].Address()}
	if len(got) > 1 && got[1] == ws[1] {
		want[1] = ws[1].Address() // pod-0's ports tie
	}
	if diff := cmp.Diff(want, addresses(got)); diff != "" {
		t.Errorf("picked (-want +got):\n%s", diff)
	}
}

// Over a large pool the cache-aware policy looks at a sample of it; the
// session's pod is found outside the sample.
func TestSessionPinOverALargePool(t *testing.T) {
	reg := registry.New()
	ws := make([]*registry.Worker, 3*sampleAbove)
	for i := range ws {
		ws[i] = registrytest.Upsert(reg, registry.Endpoint{
			Key: registry.Key{UID: fmt.Sprint("uid-", i), Port: 8000}, Namespace: "ns", Name: fmt.Sprint("pod-", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i + 1)}), 8000),
		})
	}
	p := build(t, Config{SessionAffinity: &SessionAffinityConfig{}}, reg, nil)
	for i := range 20 {
		target := ws[(i*37)%len(ws)]
		ns, name := target.Pod()
		got, err := p.Pick(&Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("p", i), 512)}, Session: token(ns, name)}, reg.Workers(), 1)
		if err != nil {
			t.Fatal(err)
		}
		if got[0] != target {
			t.Fatalf("pick %d: primary %s, want %s", i, got[0].Address(), target.Address())
		}
	}
}

// With mode prefer the weighted scorer adds sessionWeight to the session
// pod's score: enough weight keeps the session there against an idler
// pod, too little does not.
func TestSessionPreferWeighsTheSessionPod(t *testing.T) {
	for name, tc := range map[string]struct {
		weight float64
		want   int // the primary's index
	}{
		"outweighs the queue": {weight: 3, want: 1},
		"outweighed":          {weight: 0.5, want: 0},
	} {
		t.Run(name, func(t *testing.T) {
			reg, ws := pool(2)
			ws[0].SetMetrics(&registry.Metrics{Waiting: 0, KVUsage: 0.1, Scraped: epoch})
			ws[1].SetMetrics(&registry.Metrics{Waiting: 4, KVUsage: 0.1, Scraped: epoch})
			p := build(t, Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{QueueWeight: 2, SessionWeight: tc.weight},
				SessionAffinity: &SessionAffinityConfig{Mode: SessionPrefer}}, reg, nil)
			got, err := p.Pick(&Request{Model: "m", Session: token("", "pod-1")}, ws, 1)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(ws[tc.want].Address(), got[0].Address()); diff != "" {
				t.Errorf("primary (-want +got):\n%s", diff)
			}
		})
	}
}

// Without sessionAffinity a token changes nothing.
func TestSessionIgnoredWhenOff(t *testing.T) {
	reg, ws := pool(2)
	admit(t, ws[1], 3)
	p := build(t, Config{Name: LeastLoad}, reg, nil)
	got, err := p.Pick(&Request{Session: token("", "pod-1")}, ws, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got[0] != ws[0] {
		t.Errorf("primary %s, want the idle %s", got[0].Address(), ws[0].Address())
	}
}

func addresses(ws []*registry.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Address()
	}
	return out
}

// A pinned pick, over a large pool whose sample leaves out the session's
// pod, allocates nothing but its result, as any pick.
func TestSessionPinAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	reg := registry.New()
	for i := range 2 * sampleAbove {
		registrytest.Upsert(reg, registry.Endpoint{
			Key: registry.Key{UID: fmt.Sprint("uid-", i), Port: 8000}, Namespace: "ns", Name: fmt.Sprint("pod-", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, byte(i >> 8), byte(i + 1)}), 8000),
		})
	}
	p := build(t, Config{SessionAffinity: &SessionAffinityConfig{}}, reg, nil)
	req := &Request{Model: "m", Prompt: [][]byte{text("sys", 4<<10)}, Session: token("ns", "pod-200")}
	run := func() {
		if got, err := p.Pick(req, reg.Workers(), 3); err != nil || got[0].Address() != "127.0.0.201:8000" {
			t.Fatalf("pick %v, %v: want pod-200 first", got, err)
		}
	}
	for range 10 {
		run()
	}
	if allocs := testing.AllocsPerRun(100, run); allocs > 1 {
		t.Errorf("a pinned pick allocates %v times, want at most 1 (the result)", allocs)
	}
}

// twoPortPods is a pool of n pods in namespace ns, pod-i at 127.0.0.(i+1),
// each serving ports 8000 and 8001 (ranks 0 and 1): in ws, each pod's two
// workers in turn.
func twoPortPods(n int) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	var ws []*registry.Worker
	for pod := range n {
		for port := range 2 {
			ws = append(ws, registrytest.Upsert(reg, registry.Endpoint{
				Key: registry.Key{UID: fmt.Sprint("uid-", pod), Port: int32(8000 + port)}, Namespace: "ns", Name: fmt.Sprint("pod-", pod),
				Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(pod + 1)}), uint16(8000+port)), Rank: port,
			}))
		}
	}
	return reg, ws
}
