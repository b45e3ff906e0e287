package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// rolePool builds a registry of workers labelled with roles ("" for none).
func rolePool(roles ...string) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	ws := make([]*registry.Worker, len(roles))
	for i, role := range roles {
		ws[i] = registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Name:    fmt.Sprintf("pod-%d", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), 8000),
			Role:    registry.ParseRole(role, role != ""),
		})
	}
	return reg, ws
}

// Over the registry's role lists a decode pick returns only pods that
// decode, and a prefill pick only pods that prefill, never the one it
// excludes (the decode pod), whatever the policy.
func TestPicksOverRoleListsKeepToTheirRoles(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := rolePool("", "decode", "prefill", "both", "encode", "prefill")
			p := build(t, Config{Name: name}, reg, nil)
			decoders := map[*registry.Worker]bool{ws[0]: true, ws[1]: true, ws[3]: true}
			for i := range 60 {
				req := &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("prompt", i), 2048)}, Hashes: &Hashes{}}
				got, err := p.Pick(req, reg.Decoders(), 3)
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range got {
					if !decoders[w] {
						t.Fatalf("decode pick %d returned %s (role %q), which does not decode", i, w.Address(), w.Role())
					}
				}
				req.Exclude = got[0]
				pre, err := p.Pick(req, reg.Prefillers(), 1)
				if err != nil {
					t.Fatal(err)
				}
				if w := pre[0]; !w.Role().Prefills() || w == got[0] {
					t.Fatalf("prefill pick %d returned %s (role %q), the decode pod %s excluded", i, w.Address(), w.Role(), got[0].Address())
				}
			}
			if _, err := p.Pick(&Request{Exclude: ws[3]}, []*registry.Worker{ws[3]}, 1); !errors.Is(err, ErrNoCandidates) {
				t.Errorf("a pick whose only candidate is excluded: %v, want ErrNoCandidates", err)
			}
		})
	}
}

// Held is what a worker held of the prompt: for the primary of the
// request's pick, what it held before the pick placed the prompt there;
// the prefill pod's pick places the prompt on it too.
func TestHeldIsThePromptAWorkerHeldBeforeThePick(t *testing.T) {
	reg, ws := rolePool("decode", "decode", "prefill")
	p := build(t, Config{}, reg, nil)
	prompt := text("document", 10*prefix.BlockSize+100)
	first := &Request{Model: "m", Prompt: [][]byte{prompt}, Hashes: &Hashes{}}
	got, err := p.Pick(first, reg.Decoders(), 1)
	if err != nil {
		t.Fatal(err)
	}
	dec := got[0]
	if n := p.Held(first, dec); n != 0 {
		t.Errorf("the first request's decode pod held %d bytes of a prompt never seen, want 0", n)
	}
	first.Exclude = dec
	pre, err := p.Pick(first, reg.Prefillers(), 1)
	if err != nil || pre[0] != ws[2] {
		t.Fatalf("prefill pick = %v, %v; want the prefill pod", pre, err)
	}

	// The same prompt again, with a turn more: the decode pod and the
	// prefill pod hold its whole blocks.
	whole := len(prompt) / prefix.BlockSize * prefix.BlockSize
	next := &Request{Model: "m", Prompt: [][]byte{prompt, text("turn", 2*prefix.BlockSize)}, Hashes: &Hashes{}}
	for _, w := range []*registry.Worker{dec, ws[2]} {
		if n := p.Held(next, w); n != whole {
			t.Errorf("before the second pick %s holds %d bytes, want %d", w.Address(), n, whole)
		}
	}
	if got, err := p.Pick(next, reg.Decoders(), 1); err != nil || got[0] != dec {
		t.Fatalf("second pick = %v, %v; want the decode pod that holds the prompt", got, err)
	}
	if n := p.Held(next, dec); n != whole {
		t.Errorf("after the second pick its primary held %d bytes before it, want %d", n, whole)
	}
	other := ws[0]
	if other == dec {
		other = ws[1]
	}
	if n := p.Held(next, other); n != 0 {
		t.Errorf("the other decode pod holds %d bytes, want 0", n)
	}
	if allocs := testing.AllocsPerRun(100, func() { p.Held(next, other) }); allocs != 0 && !raceEnabled {
		t.Errorf("Held with the request's hashes allocates %v times, want 0", allocs)
	}
	if n := build(t, Config{Name: LeastLoad}, reg, nil).Held(next, dec); n != 0 {
		t.Errorf("a policy without an index says %d bytes are held, want 0", n)
	}
}

// A model's decode and prefill picks, alternating over their two lists,
// each find the model filter kept for their list: in steady state they
// allocate nothing into a kept result slice.
func TestAlternatingRoleListsKeepTheirModelFilters(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops pooled picks at random under the race detector")
	}
	reg, ws := rolePool("decode", "decode", "prefill", "prefill")
	served := &registry.Served{Bases: []string{"m"}, Complete: true}
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Served: served, Scraped: epoch})
	}
	p := build(t, Config{Name: LeastLoad, MetricsStaleness: Duration{time.Hour}}, reg, nil).(interface {
		AppendPick(dst []*registry.Worker, req *Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error)
	})
	req := &Request{Model: "m"}
	buf := make([]*registry.Worker, 0, 4)
	run := func() {
		for _, list := range [][]*registry.Worker{reg.Decoders(), reg.Prefillers()} {
			if _, err := p.AppendPick(buf[:0], req, list, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	run()
	if allocs := testing.AllocsPerRun(100, run); allocs != 0 {
		t.Errorf("a decode and a prefill pick allocate %v times, want 0: a model filter is rebuilt", allocs)
	}
}
