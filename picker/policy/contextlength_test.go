package policy

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
	"github.com/inferpick/inferpick/picker/session"
)

// rangePool builds a registry of workers labelled with context-length
// ranges ("" for none).
func rangePool(t *testing.T, ranges ...string) (*registry.Registry, []*registry.Worker) {
	t.Helper()
	reg := registry.New()
	ws := make([]*registry.Worker, len(ranges))
	for i, v := range ranges {
		var r registry.ContextRange
		if v != "" {
			var err error
			if r, err = registry.ParseContextRange(v); err != nil {
				t.Fatal(err)
			}
		}
		ws[i] = registrytest.Upsert(reg, registry.Endpoint{
			Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
			Name:    fmt.Sprintf("pod-%d", i),
			Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), 8000),
			Context: r,
		})
	}
	return reg, ws
}

// tokens is a request whose prompt is n tokens long (4 bytes each).
func tokens(tag string, n int) *Request {
	return &Request{Model: "m", Prompt: [][]byte{text(tag, 4*n)}, Tokens: n, Hashes: &Hashes{}}
}

// With contextLength.filter every policy returns, primary and fallbacks,
// only the pods whose range holds the prompt and those without a range.
func TestContextLengthFilterKeepsThePodsThatTakeThePrompt(t *testing.T) {
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := rangePool(t, "0-2048", "2048-32768", "", "0-2048", "2048-32768")
			p := build(t, Config{Name: name, ContextLength: &ContextLengthConfig{Filter: true}}, reg, nil)
			short := map[*registry.Worker]bool{ws[0]: true, ws[2]: true, ws[3]: true}
			long := map[*registry.Worker]bool{ws[1]: true, ws[2]: true, ws[4]: true}
			for i := range 40 {
				for _, c := range []struct {
					req  *Request
					kept map[*registry.Worker]bool
				}{{tokens(fmt.Sprint("short", i), 100), short}, {tokens(fmt.Sprint("long", i), 10000), long}} {
					got, err := p.Pick(c.req, reg.Workers(), 5)
					if err != nil {
						t.Fatal(err)
					}
					if len(got) != len(c.kept) {
						t.Errorf("a prompt of %d tokens: %d workers picked, want the %d that take it", c.req.Tokens, len(got), len(c.kept))
					}
					for _, w := range got {
						if !c.kept[w] {
							t.Fatalf("a prompt of %d tokens was given %s, whose range is %q", c.req.Tokens, w.Address(), w.ContextRange())
						}
					}
				}
			}
		})
	}
}

// A pick the filter leaves no pod for is refused, saying whether the
// prompt is longer than every range; one whose pods in range are all full
// is saturated, not refused for its length.
func TestContextLengthFilterRefusesAPromptNoPodTakes(t *testing.T) {
	reg, ws := rangePool(t, "0-2048", "4096-8192")
	p := build(t, Config{Name: LeastLoad, MaxInFlight: 1, ContextLength: &ContextLengthConfig{Filter: true}}, reg, nil)
	if _, err := p.Pick(tokens("longer", 9000), reg.Workers(), 1); !errors.Is(err, ErrPromptTooLong) || !errors.Is(err, ErrContextLength) {
		t.Errorf("a prompt longer than every range: %v, want ErrPromptTooLong (an ErrContextLength)", err)
	}
	if _, err := p.Pick(tokens("between", 3000), reg.Workers(), 1); !errors.Is(err, ErrContextLength) || errors.Is(err, ErrPromptTooLong) {
		t.Errorf("a prompt between the ranges: %v, want ErrContextLength alone", err)
	}
	admit(t, ws[1], 1)
	if _, err := p.Pick(tokens("long", 5000), reg.Workers(), 1); !errors.Is(err, ErrSaturated) {
		t.Errorf("a prompt whose one pod is full: %v, want ErrSaturated", err)
	}
	got, err := p.Pick(tokens("short", 10), reg.Workers(), 2)
	if err != nil || len(got) != 1 || got[0] != ws[0] {
		t.Errorf("a short prompt: %v, %v; want %s alone", addrs(got), err, ws[0].Address())
	}
}

// labelledRangePool builds a registry of workers labelled example.com/gpu
// gpus[i] with the context-length range ranges[i].
func labelledRangePool(t *testing.T, cfg Config, gpus, ranges []string) (*registry.Registry, []*registry.Worker) {
	t.Helper()
	reg := registry.New()
	ws := make([]*registry.Worker, len(gpus))
	for i := range gpus {
		r, err := registry.ParseContextRange(ranges[i])
		if err != nil {
			t.Fatal(err)
		}
		ep := labelledEndpoint(i, cfg.LabelKeys(), map[string]string{"example.com/gpu": gpus[i]})
		ep.Context = r
		ws[i] = registrytest.Upsert(reg, ep)
	}
	return reg, ws
}

// A pod the label filters leave out has no say in a context-length
// refusal: a pick whose filters keep no pod is refused for its labels,
// whatever the left-out pods' ranges; one whose kept pods' ranges all miss
// the prompt is refused for its length, as those ranges alone tell.
func TestContextLengthRefusalCountsOnlyThePodsTheLabelFiltersKeep(t *testing.T) {
	cfg := Config{Name: LeastLoad, ContextLength: &ContextLengthConfig{Filter: true},
		LabelFilters: []LabelFilter{{Label: "example.com/gpu", Values: []string{"h100"}}}}
	for name, tc := range map[string]struct {
		gpus, ranges []string
		tokens       int
		want         error
		notWant      error
	}{
		"no pod kept, one left out holds the prompt":    {gpus: []string{"l4", "l4"}, ranges: []string{"0-100", "2000-9000"}, tokens: 50, want: ErrLabelFilter, notWant: ErrContextLength},
		"no pod kept, one left out takes a long prompt": {gpus: []string{"l4", "l4"}, ranges: []string{"0-100", "2000-9000"}, tokens: 5000, want: ErrLabelFilter, notWant: ErrContextLength},
		"a kept pod too short, a left-out pod above it": {gpus: []string{"h100", "l4"}, ranges: []string{"0-100", "2000-9000"}, tokens: 500, want: ErrPromptTooLong},
		"a kept pod too long, a left-out pod shorter":   {gpus: []string{"l4", "h100"}, ranges: []string{"0-100", "2000-9000"}, tokens: 50, want: ErrContextLength, notWant: ErrPromptTooLong},
		"a kept pod too short, a left-out pod holds it": {gpus: []string{"h100", "l4"}, ranges: []string{"0-100", "2000-9000"}, tokens: 5000, want: ErrPromptTooLong},
	} {
		t.Run(name, func(t *testing.T) {
			reg, _ := labelledRangePool(t, cfg, tc.gpus, tc.ranges)
			_, err := build(t, cfg, reg, nil).Pick(tokens("p", tc.tokens), reg.Workers(), 2)
			if !errors.Is(err, tc.want) || tc.notWant != nil && errors.Is(err, tc.notWant) {
				t.Errorf("a prompt of %d tokens: Pick = %v, want %v", tc.tokens, err, tc.want)
			}
		})
	}
}

// The range key of a request names only the ranges of pods the label
// filters keep, and reports the request refused at once when no kept pod
// takes its prompt, whatever the left-out pods' ranges.
func TestRangeKeyCountsOnlyThePodsTheLabelFiltersKeep(t *testing.T) {
	cfg := Config{Name: LeastLoad, ContextLength: &ContextLengthConfig{Filter: true},
		LabelFilters: []LabelFilter{{Label: "example.com/gpu", Values: []string{"h100"}}}}
	reg, _ := labelledRangePool(t, cfg, []string{"l4", "h100", "l4"}, []string{"0-100", "2000-9000", "2000-4000"})
	p := build(t, cfg, reg, nil).(*engine)
	for name, tc := range map[string]struct {
		tokens int
		key    string
		held   bool
	}{
		"held by a kept pod and a left-out one": {tokens: 3000, key: "2000-9000,", held: true},
		"held by a left-out pod alone":          {tokens: 50, key: "", held: false},
	} {
		t.Run(name, func(t *testing.T) {
			key, held := p.AppendRangeKey(nil, tokens("p", tc.tokens), reg.Workers())
			if string(key) != tc.key || held != tc.held {
				t.Errorf("a prompt of %d tokens: key %q, held %v; want %q, %v", tc.tokens, key, held, tc.key, tc.held)
			}
		})
	}
	ws := reg.Workers()
	dst := make([]byte, 0, 64)
	req := tokens("p", 3000)
	if n := testing.AllocsPerRun(100, func() { dst, _ = p.AppendRangeKey(dst[:0], req, ws) }); n != 0 && !raceEnabled {
		t.Errorf("a label-filtered range key allocates %v times, want 0", n)
	}
}

// Over a large pool, whose picks sample, a filtered pick still finds the
// one pod that takes a long prompt.
func TestContextLengthFilterOverASampledPool(t *testing.T) {
	ranges := make([]string, sampleAbove+72)
	for i := range ranges {
		ranges[i] = "0-4096"
	}
	ranges[137] = "4096-131072"
	reg, ws := bigRangePool(t, ranges)
	p := build(t, Config{ContextLength: &ContextLengthConfig{Filter: true}}, reg, nil)
	for i := range 20 {
		got, err := p.Pick(tokens(fmt.Sprint("long", i), 50000), reg.Workers(), 3)
		if err != nil || len(got) != 1 || got[0] != ws[137] {
			t.Fatalf("pick %d: %v, %v; want %s alone", i, addrs(got), err, ws[137].Address())
		}
	}
}

func bigRangePool(t *testing.T, ranges []string) (*registry.Registry, []*registry.Worker) {
	t.Helper()
	reg, ws := bigPool(len(ranges))
	var eps []registry.Endpoint
	for i, w := range ws {
		ep := w.Endpoint()
		r, err := registry.ParseContextRange(ranges[i])
		if err != nil {
			t.Fatal(err)
		}
		ep.Context = r
		eps = append(eps, ep)
	}
	reg.Update(eps, nil)
	return reg, ws
}

// The weighted scorer's context-length score orders idle pods by how well
// their range suits the prompt: the range that holds it, then a pod with
// no range, then the others by how near the prompt is to their range.
func TestContextLengthScoreOrdersThePods(t *testing.T) {
	reg, ws := rangePool(t, "0-2048", "2048-8192", "", "8192-32768")
	p := build(t, Config{Name: WeightedScorer, ContextLength: &ContextLengthConfig{},
		WeightedScorer: WeightedScorerConfig{ContextLengthWeight: 3}}, reg, nil)
	for _, tc := range []struct {
		tokens int
		want   []*registry.Worker
	}{
		{tokens: 9000, want: []*registry.Worker{ws[3], ws[2], ws[1], ws[0]}},
		{tokens: 100, want: []*registry.Worker{ws[0], ws[2], ws[1], ws[3]}},
		{tokens: 3000, want: []*registry.Worker{ws[1], ws[2], ws[0], ws[3]}},
	} {
		got, err := p.Pick(tokens(fmt.Sprint(tc.tokens), tc.tokens), reg.Workers(), 4)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(addrs(tc.want), addrs(got)); diff != "" {
			t.Errorf("a prompt of %d tokens: order (-want +got):\n%s", tc.tokens, diff)
		}
	}
}

// Without the filter a prompt no range holds still goes to the nearest.
func TestContextLengthScoreWithoutFilterPlacesEveryPrompt(t *testing.T) {
	reg, ws := rangePool(t, "0-2048", "2048-8192")
	p := build(t, Config{Name: WeightedScorer, ContextLength: &ContextLengthConfig{},
		WeightedScorer: WeightedScorerConfig{ContextLengthWeight: 10}}, reg, nil)
	got, err := p.Pick(tokens("huge", 20000), reg.Workers(), 1)
	if err != nil || got[0] != ws[1] {
		t.Errorf("a prompt longer than every range: %v, %v; want %s, the nearest", addrs(got), err, ws[1].Address())
	}
}

func TestContextScoreTiers(t *testing.T) {
	r := func(v string) registry.ContextRange {
		c, err := registry.ParseContextRange(v)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for name, tc := range map[string]struct {
		tokens        int
		better, worse registry.ContextRange
	}{
		"in range beats out of range":  {tokens: 9000, better: r("0-1000000"), worse: r("8193-8999")},
		"in range beats no range":      {tokens: 100, better: r("0-2048"), worse: registry.ContextRange{}},
		"no range beats out of range":  {tokens: 100, better: registry.ContextRange{}, worse: r("101-200")},
		"narrower beats wider":         {tokens: 1000, better: r("0-2048"), worse: r("0-32768")},
		"more room beats less":         {tokens: 1000, better: r("500-3000"), worse: r("0-2500")},
		"nearer beats farther (above)": {tokens: 9000, better: r("0-8192"), worse: r("0-2048")},
		"nearer beats farther (below)": {tokens: 100, better: r("200-400"), worse: r("2000-2200")},
	} {
		b, w := contextScore(tc.tokens, tc.better), contextScore(tc.tokens, tc.worse)
		if !(b > w) || b > 1 || w < 0 {
			t.Errorf("%s: %q scores %v, %q %v for %d tokens", name, tc.better, b, tc.worse, w, tc.tokens)
		}
	}
	if got := contextScore(512, r("512-512")); got != 1 {
		t.Errorf("a one-length range that holds the prompt scores %v, want 1", got)
	}
	if got := contextScore(100, registry.ContextRange{}); got != neutralRange {
		t.Errorf("no range scores %v, want %v", got, neutralRange)
	}
	// llm-d's numbers, worked from its formula: a migrated config weighs
	// them against the other scores alike.
	for name, tc := range map[string]struct {
		tokens int
		r      string
		want   float64
	}{
		"in a narrow range": {tokens: 1000, r: "0-2048", want: 0.8141674448041167},
		"in a wide range":   {tokens: 5000, r: "2048-32768", want: 0.6101543007121807},
		"808 tokens above":  {tokens: 9000, r: "0-8192", want: 0.165929203539823},
		"1900 tokens below": {tokens: 100, r: "2000-2200", want: 0.10344827586206896},
	} {
		if got := contextScore(tc.tokens, r(tc.r)); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: %d tokens against %s score %v, want llm-d's %v", name, tc.tokens, tc.r, got, tc.want)
		}
	}
}

func TestContextLengthConfig(t *testing.T) {
	for name, tc := range map[string]struct {
		cfg  Config
		want string // in the error; "" for none
	}{
		"weight without a block": {cfg: Config{Name: WeightedScorer, WeightedScorer: WeightedScorerConfig{ContextLengthWeight: 1}},
			want: "weightedScorer.contextLengthWeight"},
		"negative weight": {cfg: Config{Name: WeightedScorer, ContextLength: &ContextLengthConfig{}, WeightedScorer: WeightedScorerConfig{ContextLengthWeight: -1}},
			want: "weightedScorer.contextLengthWeight"},
		"bad label":   {cfg: Config{ContextLength: &ContextLengthConfig{Label: "a label"}}, want: "contextLength.label"},
		"filter only": {cfg: Config{ContextLength: &ContextLengthConfig{Filter: true}}},
	} {
		err := tc.cfg.Default().Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want an error naming %q", name, err, tc.want)
		}
	}
	d := Config{Name: WeightedScorer, ContextLength: &ContextLengthConfig{}, WeightedScorer: WeightedScorerConfig{ContextLengthWeight: 3}}.Default()
	if d.ContextLength.Label != DefaultContextLengthLabel {
		t.Errorf("default label %q, want %q", d.ContextLength.Label, DefaultContextLengthLabel)
	}
	if want := (WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, ContextLengthWeight: 3}); d.WeightedScorer != want {
		t.Errorf("a context-length weight alone: weights %+v, want the defaults beside it %+v", d.WeightedScorer, want)
	}
	ca := Config{ContextLength: &ContextLengthConfig{Filter: true}, WeightedScorer: WeightedScorerConfig{ContextLengthWeight: 3}}.Default()
	if w := ca.Warnings(); len(w) != 1 || !strings.Contains(w[0], "no effect with policy cache-aware") {
		t.Errorf("cache-aware with a context-length weight warns %q, want that it has no effect", w)
	}
	if w := d.Warnings(); len(w) != 0 {
		t.Errorf("weighted-scorer with a context-length weight warns %q", w)
	}
	for _, name := range []string{CacheAware, LeastLoad, RoundRobin, Random, PowerOfTwo} {
		c := Config{Name: name, ContextLength: &ContextLengthConfig{}}.Default()
		if w := c.Warnings(); len(w) != 1 || !strings.Contains(w[0], "contextLength without filter has no effect with policy "+name) {
			t.Errorf("%s with a contextLength block that does not filter warns %q, want that it has no effect", name, w)
		}
		c.ContextLength.Filter = true
		if w := c.Warnings(); len(w) != 0 {
			t.Errorf("%s with a contextLength block that filters warns %q", name, w)
		}
	}
}

// A session id is placed among the pods that take its prompt: a long
// conversation keeps to one long-context pod, the same whatever replica
// (policy) places it, and the ids spread over those pods.
func TestContextLengthFilterKeepsASessionIDOnAPodInRange(t *testing.T) {
	reg, ws := rangePool(t, "0-2048", "0-2048", "2048-65536", "2048-65536", "0-2048")
	long := map[*registry.Worker]bool{ws[2]: true, ws[3]: true}
	cfg := Config{ContextLength: &ContextLengthConfig{Filter: true}, SessionAffinity: idAffinity()}
	a, b := build(t, cfg, reg, nil), build(t, cfg, reg, nil)
	used := map[*registry.Worker]bool{}
	for i := range 40 {
		id := session.Of(fmt.Sprint("conversation-", i))
		var home *registry.Worker
		for turn := range 4 {
			req := tokens(fmt.Sprint("turn", i, turn), 3000+1000*turn)
			req.SessionID = id
			p := a
			if turn%2 == 1 {
				p = b
			}
			got, err := p.Pick(req, reg.Workers(), 1)
			if err != nil {
				t.Fatal(err)
			}
			if !long[got[0]] {
				t.Fatalf("session %d turn %d went to %s, range %q", i, turn, got[0].Address(), got[0].ContextRange())
			}
			if home == nil {
				home = got[0]
			} else if got[0] != home {
				t.Fatalf("session %d moved from %s to %s on turn %d", i, home.Address(), got[0].Address(), turn)
			}
		}
		used[home] = true
	}
	if len(used) != 2 {
		t.Errorf("40 sessions were placed on %d long-context pods, want both", len(used))
	}
}
