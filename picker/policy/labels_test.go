package policy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/registry/registrytest"
)

// matches reports whether one filter keeps a pod of podLabels.
func matches(t *testing.T, f LabelFilter, podLabels map[string]string) bool {
	t.Helper()
	cfg := Config{LabelFilters: []LabelFilter{f}}
	if errs := validateLabelFilters("labelFilters", cfg.LabelFilters); len(errs) > 0 {
		t.Fatalf("filter %+v: %v", f, errs)
	}
	keys := cfg.LabelKeys()
	return newLabelMatcher(cfg.LabelFilters, keys).admits(registry.LabelsOf(keys, podLabels))
}

func TestByLabelMatchesAsLLMD(t *testing.T) {
	gpu := "example.com/gpu"
	cases := map[string]struct {
		filter LabelFilter
		pod    map[string]string
		want   bool
	}{
		"value listed":                    {LabelFilter{Label: gpu, Values: []string{"a100", "h100"}}, map[string]string{gpu: "h100"}, true},
		"value not listed":                {LabelFilter{Label: gpu, Values: []string{"a100"}}, map[string]string{gpu: "l4"}, false},
		"no label":                        {LabelFilter{Label: gpu, Values: []string{"a100"}}, map[string]string{"other": "a100"}, false},
		"no label, allowed":               {LabelFilter{Label: gpu, Values: []string{"a100"}, AllowsNoLabel: true}, nil, true},
		"labelled, allowsNoLabel alone":   {LabelFilter{Label: gpu, AllowsNoLabel: true}, map[string]string{gpu: "a100"}, false},
		"empty value listed, no label":    {LabelFilter{Label: gpu, Values: []string{""}}, nil, true},
		"empty value listed, empty label": {LabelFilter{Label: gpu, Values: []string{""}}, map[string]string{gpu: ""}, true},
		"empty value, not listed":         {LabelFilter{Label: gpu, Values: []string{"a100"}}, map[string]string{gpu: ""}, false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := matches(t, tc.filter, tc.pod); got != tc.want {
				t.Errorf("filter %s in %q (allowsNoLabel %v) on pod labels %q: kept %v, want %v", tc.filter.Label, tc.filter.Values, tc.filter.AllowsNoLabel, tc.pod, got, tc.want)
			}
		})
	}
}

// TestByLabelSelectorMatchesAsKubernetes checks each selector against the
// Kubernetes selector llm-d's by-label-selector builds, on every pod.
func TestByLabelSelectorMatchesAsKubernetes(t *testing.T) {
	pods := []map[string]string{
		nil,
		{"tier": "gold"},
		{"tier": "silver"},
		{"tier": ""},
		{"tier": "gold", "zone": "a"},
		{"zone": "b"},
		{"tier": "bronze", "zone": "a", "extra": "x"},
	}
	selectors := map[string]LabelSelector{
		"empty":              {},
		"matchLabels":        {MatchLabels: map[string]string{"tier": "gold"}},
		"two matchLabels":    {MatchLabels: map[string]string{"tier": "gold", "zone": "a"}},
		"In":                 {MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "In", Values: []string{"gold", "silver"}}}},
		"NotIn":              {MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "NotIn", Values: []string{"gold"}}}},
		"Exists":             {MatchExpressions: []LabelRequirement{{Key: "zone", Operator: "Exists"}}},
		"DoesNotExist":       {MatchExpressions: []LabelRequirement{{Key: "zone", Operator: "DoesNotExist"}}},
		"In empty value":     {MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "In", Values: []string{""}}}},
		"labels and exprs":   {MatchLabels: map[string]string{"zone": "a"}, MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "NotIn", Values: []string{"bronze"}}}},
		"same key twice":     {MatchLabels: map[string]string{"tier": "gold"}, MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "In", Values: []string{"silver"}}}},
		"exists and not in":  {MatchExpressions: []LabelRequirement{{Key: "tier", Operator: "Exists"}, {Key: "tier", Operator: "NotIn", Values: []string{"gold", ""}}}},
		"absent key matters": {MatchExpressions: []LabelRequirement{{Key: "missing", Operator: "NotIn", Values: []string{"x"}}, {Key: "tier", Operator: "In", Values: []string{"gold"}}}},
	}
	for name, sel := range selectors {
		t.Run(name, func(t *testing.T) {
			kube, err := metav1.LabelSelectorAsSelector(sel.kube())
			if err != nil {
				t.Fatal(err)
			}
			for _, pod := range pods {
				want := kube.Matches(labels.Set(pod))
				if got := matches(t, LabelFilter{Selector: &sel}, pod); got != want {
					t.Errorf("selector %q on pod labels %v: kept %v, Kubernetes' selector %v", kube, pod, got, want)
				}
			}
		})
	}
}

func TestLabelFiltersAreValidatedAsLLMD(t *testing.T) {
	cases := map[string]struct {
		filters []LabelFilter
		says    string
	}{
		"no label":              {[]LabelFilter{{Values: []string{"a"}}}, "labelFilters[0].label: must name a pod label"},
		"no values":             {[]LabelFilter{{Label: "gpu"}}, "labelFilters[0]: values must list at least one value, or allowsNoLabel be true"},
		"invalid label":         {[]LabelFilter{{Label: "a b", Values: []string{"x"}}}, `labelFilters[0].label: "a b" is invalid`},
		"both kinds":            {[]LabelFilter{{Label: "gpu", Values: []string{"x"}, Selector: &LabelSelector{}}}, "labelFilters[0]: give either selector or label"},
		"unknown operator":      {[]LabelFilter{{Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "k", Operator: "Gt", Values: []string{"1"}}}}}}, `labelFilters[0].selector: "Gt" is not a valid label selector operator`},
		"In without values":     {[]LabelFilter{{Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "k", Operator: "In"}}}}}, "labelFilters[0].selector: values: Invalid value: null: for 'in', 'notin' operators, values set can't be empty"},
		"Exists with values":    {[]LabelFilter{{Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "k", Operator: "Exists", Values: []string{"x"}}}}}}, "labelFilters[0].selector: values: Invalid value"},
		"bad matchLabels value": {[]LabelFilter{{Selector: &LabelSelector{MatchLabels: map[string]string{"k": "a b"}}}}, "labelFilters[0].selector:"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			err := (Config{LabelFilters: tc.filters}).Default().Validate()
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Validate() = %v, want an error saying %q", err, tc.says)
			}
			err = (Config{Disaggregation: &DisaggregationConfig{PrefillLabelFilters: tc.filters}}).Default().Validate()
			if err == nil || !strings.Contains(err.Error(), "disaggregation.prefillLabelFilters[0]") {
				t.Errorf("prefill stage: Validate() = %v, want an error naming disaggregation.prefillLabelFilters", err)
			}
			err = (Config{Disaggregation: &DisaggregationConfig{EncodeLabelFilters: tc.filters}}).Default().Validate()
			if err == nil || !strings.Contains(err.Error(), "disaggregation.encodeLabelFilters[0]") {
				t.Errorf("encode stage: Validate() = %v, want an error naming disaggregation.encodeLabelFilters", err)
			}
		})
	}
}

// labelledPool is pool(n) with worker i carrying labels of[i].
func labelledPool(keys []string, of []map[string]string) (*registry.Registry, []*registry.Worker) {
	reg := registry.New()
	ws := make([]*registry.Worker, len(of))
	for i := range ws {
		ws[i] = registrytest.Upsert(reg, labelledEndpoint(i, keys, of[i]))
	}
	return reg, ws
}

func labelledEndpoint(i int, keys []string, l map[string]string) registry.Endpoint {
	return registry.Endpoint{
		Key:     registry.Key{UID: fmt.Sprintf("pod-%d", i), Port: 8000},
		Name:    fmt.Sprintf("pod-%d", i),
		Address: netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, byte(i + 1)}), 8000),
		Labels:  registry.LabelsOf(keys, l),
	}
}

// TestLabelFilterKeepsOnlySelectedPods picks through every policy: a pod
// the filters leave out never gets a request, and a label edited on a
// running pod moves the traffic while the pod keeps its load.
func TestLabelFilterKeepsOnlySelectedPods(t *testing.T) {
	cfg := Config{LabelFilters: []LabelFilter{
		{Label: "example.com/gpu", Values: []string{"h100"}},
		{Selector: &LabelSelector{MatchExpressions: []LabelRequirement{{Key: "example.com/drain", Operator: "DoesNotExist"}}}},
	}}
	keys := cfg.LabelKeys()
	of := []map[string]string{
		{"example.com/gpu": "h100"},
		{"example.com/gpu": "l4"},
		{"example.com/gpu": "h100", "example.com/drain": "true"},
		{},
		{"example.com/gpu": "h100", "unread": "x"},
	}
	for _, name := range allPolicies {
		t.Run(name, func(t *testing.T) {
			reg, ws := labelledPool(keys, of)
			cfg := cfg
			cfg.Name = name
			p := build(t, cfg, reg, nil)
			// Prompts share nothing, so that no pod holds the next one.
			req := func(i int) *Request { return chat(fmt.Sprint("sys", i), fmt.Sprint("user", i), 512, 256) }
			got := counts(t, p, reg.Workers(), 200, req)
			for _, out := range []int{1, 2, 3} {
				if n := got[ws[out].Address()]; n > 0 {
					t.Errorf("pod %d (labels %v) got %d of 200 requests; the filters leave it out", out, of[out], n)
				}
			}
			if got[ws[0].Address()]+got[ws[4].Address()] != 200 {
				t.Errorf("picks %v: want all 200 on pods 0 and 4", got)
			}

			// Pod 0 is drained by a label edit, pod 1 given an h100: same
			// workers, new labels.
			admit(t, ws[0], 3)
			registrytest.Upsert(reg, labelledEndpoint(0, keys, map[string]string{"example.com/gpu": "h100", "example.com/drain": "yes"}))
			registrytest.Upsert(reg, labelledEndpoint(1, keys, map[string]string{"example.com/gpu": "h100"}))
			if w, _ := registrytest.Find(reg, ws[0].Endpoint().Key); w != ws[0] {
				t.Fatal("a label edit replaced the worker")
			}
			if pre, _ := ws[0].Load(); pre != 3 {
				t.Errorf("pod 0 holds %d requests after its label edit, want the 3 it had", pre)
			}
			got = counts(t, p, reg.Workers(), 200, req)
			if got[ws[0].Address()] > 0 {
				t.Errorf("drained pod 0 got %d of 200 requests after its label edit", got[ws[0].Address()])
			}
			if got[ws[1].Address()] == 0 {
				t.Errorf("pod 1 got no request after its label edit made it an h100: %v", got)
			}
		})
	}
}

func TestLabelFilterThatKeepsNoPodRefusesThePick(t *testing.T) {
	cfg := Config{LabelFilters: []LabelFilter{{Label: "example.com/gpu", Values: []string{"b200"}}}}
	reg, _ := labelledPool(cfg.LabelKeys(), []map[string]string{{"example.com/gpu": "h100"}, {}})
	for _, name := range allPolicies {
		cfg.Name = name
		_, err := build(t, cfg, reg, nil).Pick(chat("s", "u", 100, 100), reg.Workers(), 2)
		if !errors.Is(err, ErrLabelFilter) {
			t.Errorf("%s: Pick = %v, want ErrLabelFilter", name, err)
		}
	}
}

// TestPrefillLabelFiltersApplyToThePrefillPick: each stage's pick takes its
// own filters, as llm-d's prefill and decode profiles do.
func TestPrefillLabelFiltersApplyToThePrefillPick(t *testing.T) {
	cfg := Config{
		Name:           LeastLoad,
		LabelFilters:   []LabelFilter{{Label: "pool", Values: []string{"decode-a"}}},
		Disaggregation: &DisaggregationConfig{PrefillLabelFilters: []LabelFilter{{Label: "pool", Values: []string{"prefill-b"}}}},
	}
	keys := cfg.LabelKeys()
	reg, ws := labelledPool(keys, []map[string]string{{"pool": "decode-a"}, {"pool": "prefill-b"}, {"pool": "other"}})
	p := build(t, cfg, reg, nil)
	for i := range 20 {
		got, err := p.Pick(chat("s", fmt.Sprint(i), 100, 100), reg.Workers(), 3)
		if err != nil || len(got) != 1 || got[0] != ws[0] {
			t.Fatalf("decode pick = %v, %v; want pod 0 alone", got, err)
		}
		req := chat("s", fmt.Sprint(i), 100, 100)
		req.Prefill = true
		got, err = p.Pick(req, reg.Workers(), 3)
		if err != nil || len(got) != 1 || got[0] != ws[1] {
			t.Fatalf("prefill pick = %v, %v; want pod 1 alone", got, err)
		}
	}
}

// TestLabelFilteredPickAllocatesNothingMore: the filters cost a pick no
// allocation.
func TestLabelFilteredPickAllocatesNothingMore(t *testing.T) {
	cfg := Config{Name: LeastLoad, LabelFilters: []LabelFilter{{Selector: &LabelSelector{MatchLabels: map[string]string{"tier": "gold"}, MatchExpressions: []LabelRequirement{{Key: "zone", Operator: "NotIn", Values: []string{"c"}}}}}}}
	keys := cfg.LabelKeys()
	of := make([]map[string]string, 16)
	for i := range of {
		of[i] = map[string]string{"tier": []string{"gold", "silver"}[i%2], "zone": []string{"a", "b", "c"}[i%3]}
	}
	reg, _ := labelledPool(keys, of)
	p := build(t, cfg, reg, nil).(*engine)
	req := &Request{Model: ""}
	dst := make([]*registry.Worker, 0, 2)
	ws := reg.Workers()
	if n := testing.AllocsPerRun(100, func() { _, _ = p.AppendPick(dst[:0], req, ws, 2) }); n != 0 && !raceEnabled {
		t.Errorf("a label-filtered pick allocates %v times, want 0", n)
	}
}

// TestAPromptOnlyAFilteredOutPodHoldsIsNotKnown: the index knows a prompt
// while a pod the label filters keep holds it; once a label edit leaves
// that pod out, the prompt will go elsewhere, and the model servers are
// worth asking where it is cached. The check allocates nothing more for
// the filters.
func TestAPromptOnlyAFilteredOutPodHoldsIsNotKnown(t *testing.T) {
	cfg := Config{Name: CacheAware, LabelFilters: []LabelFilter{{Label: "example.com/gpu", Values: []string{"h100"}}}}
	keys := cfg.LabelKeys()
	reg, ws := labelledPool(keys, []map[string]string{{"example.com/gpu": "h100"}, {"example.com/gpu": "l4"}})
	p := build(t, cfg, reg, nil)
	k := p.(interface{ Knows(*Request) bool })
	req := func() *Request {
		return &Request{Model: "m", Prompt: [][]byte{text("system", 30<<10), text("user", 2<<10)}}
	}
	if got, err := p.Pick(req(), reg.Workers(), 1); err != nil || len(got) != 1 || got[0] != ws[0] {
		t.Fatalf("Pick = %v, %v; want pod 0 (the h100)", got, err)
	}
	if !k.Knows(req()) {
		t.Fatal("the prompt pod 0 holds is not known while the filter keeps pod 0")
	}
	r := req()
	if n := testing.AllocsPerRun(20, func() { k.Knows(r) }); n != 0 && !raceEnabled {
		t.Errorf("Knows allocates %v times, want 0", n)
	}

	registrytest.Upsert(reg, labelledEndpoint(0, keys, map[string]string{"example.com/gpu": "l4"}))
	registrytest.Upsert(reg, labelledEndpoint(1, keys, map[string]string{"example.com/gpu": "h100"}))
	if k.Knows(req()) {
		t.Error("the prompt is known though only pod 0 holds it, which the filter now leaves out")
	}
}

// The encode stage's filters read their labels too, and keep only the pods
// they select.
func TestEncodeLabelFilter(t *testing.T) {
	cfg := Config{Disaggregation: &DisaggregationConfig{EncodeLabelFilters: []LabelFilter{{Label: "zone", Values: []string{"a"}}}}}
	if diff := cmp.Diff([]string{"zone"}, cfg.LabelKeys()); diff != "" {
		t.Errorf("label keys (-want +got):\n%s", diff)
	}
	_, ws := labelledPool(cfg.LabelKeys(), []map[string]string{{"zone": "a"}, {"zone": "b"}, {}})
	keep := cfg.EncodeLabelFilter()
	if keep == nil || !keep(ws[0]) || keep(ws[1]) || keep(ws[2]) {
		t.Errorf("the encode filter keeps the wrong pods")
	}
	if (Config{}).EncodeLabelFilter() != nil {
		t.Errorf("no encode filters, yet a filter")
	}
}
