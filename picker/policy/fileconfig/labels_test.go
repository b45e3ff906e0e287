package fileconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
)

// llm-d's by-label and by-label-selector become the policy's label
// filters, of the stage whose profile lists them.
func TestLabelFiltersAreTranslated(t *testing.T) {
	cases := map[string]struct {
		in       string
		want     policy.Config
		warnings []string
	}{
		"by-label-selector and by-label in one profile": {
			in: readSample(t, "llm-d-v0.8.0-by-label-selector.yaml"),
			want: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3},
				LabelFilters: []policy.LabelFilter{
					{Selector: &policy.LabelSelector{
						MatchLabels:      map[string]string{"inference-role": "decode", "hardware-type": "H100"},
						MatchExpressions: []policy.LabelRequirement{{Key: "topology.kubernetes.io/zone", Operator: "NotIn", Values: []string{"zone-c"}}},
					}},
					{Label: "example.com/drain", Values: []string{"false"}, AllowsNoLabel: true},
				},
			},
		},
		"P/D with custom role labels: each profile's filter to its stage": {
			in: readSample(t, "llm-d-v0.8.0-pd-by-label.yaml"),
			want: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 1},
				LabelFilters:   []policy.LabelFilter{{Label: "role", Values: []string{"decode"}}},
				Disaggregation: &policy.DisaggregationConfig{
					MinUncachedTokens:   8,
					PrefillLabelFilters: []policy.LabelFilter{{Label: "role", Values: []string{"prefill"}}},
					PrefillPods:         policy.PrefillPodsAll,
				},
			},
			warnings: []string{
				"featureGate prepareDataPlugins has no effect: it turned on upstream's data-preparing plugins (v1.3 and v1.4), such as the prefix match llm-d's prefill deciders read; the picker keeps its prefix index itself",
				"parameters of prefix-cache-scorer have no effect: the prefix index uses 64-byte blocks and sizes itself from vllm:cache_config_info",
			},
		},
		"P/D with custom role labels, neither profile filtering: the prefill pod among every pod": {
			in: strings.NewReplacer("  - pluginRef: prefill-pods\n", "", "  - pluginRef: decode-pods\n", "").
				Replace(readSample(t, "llm-d-v0.8.0-pd-by-label.yaml")),
			want: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{MinUncachedTokens: 8, PrefillPods: policy.PrefillPodsAll},
			},
			warnings: []string{
				"featureGate prepareDataPlugins has no effect: it turned on upstream's data-preparing plugins (v1.3 and v1.4), such as the prefix match llm-d's prefill deciders read; the picker keeps its prefix index itself",
				"parameters of prefix-cache-scorer have no effect: the prefix index uses 64-byte blocks and sizes itself from vllm:cache_config_info",
			},
		},
		"P/D with llm-d's role filters and a label filter in the prefill profile": {
			in: header + "plugins:\n- type: prefill-filter\n- type: decode-filter\n- type: queue-scorer\n" +
				"- type: by-label\n  name: fast\n  parameters: {label: gpu, validValues: [h100]}\n" +
				"- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n" +
				"schedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: fast}, {pluginRef: queue-scorer}]\n" +
				"- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n",
			want: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{PrefillLabelFilters: []policy.LabelFilter{{Label: "gpu", Values: []string{"h100"}}}},
			},
		},
		"E/PD with a label filter in the encode profile": {
			in: header + "plugins:\n- type: encode-filter\n- type: decode-filter\n- type: queue-scorer\n" +
				"- type: by-label-selector\n  name: near\n  parameters: {matchLabels: {zone: a}}\n" +
				"- type: always-disagg-multimodal-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {encode: always-disagg-multimodal-decider}}\n" +
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}, {pluginRef: near}]\n" +
				"- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n",
			want: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{
					PrefillPods:        policy.PrefillPodsNone,
					Encode:             policy.EncodeMultimodal,
					EncodeLabelFilters: []policy.LabelFilter{{Selector: &policy.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}}},
				},
			},
		},
		"no profiles: upstream's default profile lists the filter": {
			in:   header + "plugins:\n- type: by-label\n  parameters: {label: gpu, allowsNoLabel: true}\n- type: queue-scorer\n",
			want: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}, LabelFilters: []policy.LabelFilter{{Label: "gpu", AllowsNoLabel: true}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got.Policy); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.warnings, got.Warnings); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if err := got.Policy.Default().Validate(); err != nil {
				t.Errorf("the translated policy is invalid: %v", err)
			}
		})
	}
}

func TestLabelFiltersReject(t *testing.T) {
	plugin := func(typ, params string) string {
		return header + "plugins:\n- type: queue-scorer\n- type: " + typ + "\n  name: f\n  parameters:\n" + params
	}
	cases := map[string]struct {
		in, says string
	}{
		"by-label without a label":            {plugin("by-label", "    validValues: [a]\n"), `line 5: by-label "f" needs a label, as llm-d requires`},
		"by-label without parameters":         {header + "plugins:\n- type: by-label\n", `line 4: by-label "by-label" needs a label`},
		"by-label with an empty label":        {plugin("by-label", "    label: \"\"\n    validValues: [a]\n"), `line 5: by-label "f" needs a label`},
		"by-label without validValues":        {plugin("by-label", "    label: gpu\n"), `line 5: by-label "f" needs validValues, or allowsNoLabel true, as llm-d requires`},
		"by-label, empty validValues":         {plugin("by-label", "    label: gpu\n    validValues: []\n    allowsNoLabel: false\n"), `line 5: by-label "f" needs validValues`},
		"by-label, validValues not a list":    {plugin("by-label", "    label: gpu\n    validValues: h100\n"), "line 9: by-label validValues must be a list of values"},
		"by-label, allowsNoLabel not a bool":  {plugin("by-label", "    label: gpu\n    allowsNoLabel: maybe\n"), `line 9: by-label allowsNoLabel "maybe" is not true or false`},
		"by-label, a label no pod can carry":  {plugin("by-label", "    label: \"a b\"\n    validValues: [x]\n"), `line 5: by-label "f".label: "a b" is invalid`},
		"selector, unknown operator":          {plugin("by-label-selector", "    matchExpressions:\n    - {key: k, operator: Gt, values: [\"1\"]}\n"), `line 9: by-label-selector matchExpressions entry: "Gt" is not a valid label selector operator`},
		"selector, In without values":         {plugin("by-label-selector", "    matchExpressions:\n    - {key: k, operator: In}\n"), "line 9: by-label-selector matchExpressions entry: values: Invalid value"},
		"selector, Exists with values":        {plugin("by-label-selector", "    matchExpressions:\n    - {key: k, operator: Exists, values: [a]}\n"), "line 9: by-label-selector matchExpressions entry: values: Invalid value"},
		"selector, unknown expression field":  {plugin("by-label-selector", "    matchExpressions:\n    - {key: k, operator: Exists, value: a}\n"), `line 9: unknown by-label-selector matchExpressions field "value"`},
		"selector, matchLabels not a mapping": {plugin("by-label-selector", "    matchLabels: [a]\n"), "line 8: by-label-selector matchLabels must be a mapping of label to value"},
		"selector, a value no pod can carry":  {plugin("by-label-selector", "    matchLabels: {k: \"a b\"}\n"), `line 5: by-label-selector "f".selector: values[0][k]: Invalid value: "a b"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Parse = %v, want an error saying %q", err, tc.says)
			}
		})
	}
}

func TestLabelFilterInertParametersAreWarned(t *testing.T) {
	f, err := Parse([]byte(header + "plugins:\n- type: by-label\n  parameters: {label: gpu, validValues: [a], name: x}\n" +
		"- type: by-label-selector\n  parameters: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"by-label parameters name have no effect: it takes label, validValues and allowsNoLabel",
		`by-label-selector "by-label-selector" selects no label: it keeps every pod, as in llm-d`,
	}
	if diff := cmp.Diff(want, f.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}
