package fileconfig

import (
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
)

func ptr(f float64) *float64 { return &f }

// latencyDoc is upstream's latency pipeline in one profile, with the
// plugins given (from line 3) and the profile's plugins.
func latencyDoc(plugins, profile string) string {
	return header + "plugins:\n" + plugins + "schedulingProfiles:\n- name: default\n  plugins:\n" + profile
}

func TestLatencyPluginsAreTranslated(t *testing.T) {
	affinityWarning := func(name, value string) string {
		return name + " (prefix-cache-affinity-filter) affinityThreshold " + value + " has no effect: " + whyAffinity
	}
	cases := map[string]struct {
		in   string
		want File
	}{
		"upstream v1.5.0's chart with the latency predictor: cache-aware with the slo block and admission": {
			in: readSample(t, "gie-v1.5.0-latency-predictor-config.yaml"),
			want: File{
				Policy:      policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{Admission: true, WholeResponse: true}},
				MetricsPath: "/metrics",
				Warnings:    []string{affinityWarning("strict-affinity-filter", "0.99"), affinityWarning("loose-affinity-filter", "0.80")},
			},
		},
		"the producer's sloBufferFactor and the tier filter's epsilonExploreNeg": {
			in: latencyDoc("- type: predicted-latency-producer\n  parameters: {sloBufferFactor: 1.25, samplingMean: 500, streamingMode: true}\n- type: slo-headroom-tier-filter\n  parameters: {epsilonExploreNeg: 0}\n- type: latency-scorer\n  parameters: {headroomSelectionStrategy: most}\n- {type: weighted-random-picker, parameters: {maxNumOfEndpoints: 3}}\n",
				"  - pluginRef: predicted-latency-producer\n  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n"),
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{BufferFactor: 1.25, ExploreNegative: ptr(0)}},
				MaxEndpoints: 3,
				Warnings: []string{
					"predicted-latency-producer samplingMean 500 has no effect: " + whySampling,
					"latency-scorer headroomSelectionStrategy most has no effect: " + whyRanking,
				},
			},
		},
		"without a tier filter nothing is explored, as upstream's latency-scorer": {
			in:   latencyDoc("- type: predicted-latency-producer\n- type: latency-scorer\n", "  - pluginRef: predicted-latency-producer\n  - pluginRef: latency-scorer\n"),
			want: File{Policy: policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{ExploreNegative: ptr(0), WholeResponse: true}}},
		},
		"the producer's streamingMode false, as by default, learns and judges the whole response": {
			in:   latencyDoc("- type: predicted-latency-producer\n  parameters: {streamingMode: false}\n- type: slo-headroom-tier-filter\n", "  - pluginRef: predicted-latency-producer\n  - pluginRef: slo-headroom-tier-filter\n"),
			want: File{Policy: policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{WholeResponse: true}}},
		},
		"predicted-latency-scorer's streamingMode false learns and judges the whole response": {
			in:   latencyDoc("- type: predicted-latency-scorer\n  parameters: {streamingMode: false}\n", "  - pluginRef: predicted-latency-scorer\n"),
			want: File{Policy: policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{Admission: true, WholeResponse: true}}},
		},
		"two predictors that disagree on streamingMode: the first in the profile is followed": {
			in: latencyDoc("- {name: a, type: predicted-latency-producer}\n- {name: b, type: predicted-latency-producer, parameters: {streamingMode: true}}\n- type: slo-headroom-tier-filter\n",
				"  - pluginRef: b\n  - pluginRef: a\n  - pluginRef: slo-headroom-tier-filter\n"),
			want: File{
				Policy:   policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{}},
				Warnings: []string{"a streamingMode false has no effect: the slo block follows b's streamingMode true, the first in the profile"},
			},
		},
		"predicted-latency-scorer predicts, tiers and admits on its own": {
			in: latencyDoc("- type: predicted-latency-scorer\n  parameters: {sloBufferFactor: 2, epsilonExploreNeg: 0.05, affinityGateTau: 0.9}\n", "  - pluginRef: predicted-latency-scorer\n"),
			want: File{
				Policy:   policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{BufferFactor: 2, ExploreNegative: ptr(0.05), Admission: true}},
				Warnings: []string{"predicted-latency-scorer affinityGateTau 0.9 has no effect: " + whyAffinity},
			},
		},
		"scorers beside the producer rank the pods that meet the objectives": {
			in: latencyDoc("- type: predicted-latency-producer\n- type: slo-headroom-tier-filter\n- type: queue-scorer\n- type: prefix-cache-scorer\n",
				"  - pluginRef: predicted-latency-producer\n  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n    weight: 3\n"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 3}, SLO: &policy.SLOConfig{WholeResponse: true}}},
		},
		"a producer beside plain scorers alone routes nothing by latency: no slo block, as upstream": {
			in: latencyDoc("- type: predicted-latency-producer\n- type: queue-scorer\n- type: prefix-cache-scorer\n",
				"  - pluginRef: predicted-latency-producer\n  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-scorer\n"),
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 1}},
				Warnings: []string{"predicted-latency-producer has no effect: nothing acts on its predictions (no slo-headroom-tier-filter, latency-scorer or predicted-latency-scorer in the scheduling profile, no latency-slo-admitter in plugins), so latency objectives route nothing, as upstream"},
			},
		},
		"latency-scorer's weights warn whatever their sign, as upstream checks none": {
			in: latencyDoc("- type: predicted-latency-producer\n- type: latency-scorer\n  parameters: {ttftWeight: -1, compositeKVWeight: -0.5}\n", "  - pluginRef: latency-scorer\n"),
			want: File{
				Policy: policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{ExploreNegative: ptr(0), WholeResponse: true}},
				Warnings: []string{
					"latency-scorer ttftWeight -1 has no effect: " + whyRanking,
					"latency-scorer compositeKVWeight -0.5 has no effect: " + whyRanking,
				},
			},
		},
		"predictInPrepareData false predicts nothing: no slo block": {
			in: latencyDoc("- type: predicted-latency-producer\n  parameters: {predictInPrepareData: false}\n- type: latency-scorer\n", "  - pluginRef: predicted-latency-producer\n  - pluginRef: latency-scorer\n"),
			want: File{
				Policy:   policy.Config{Name: policy.CacheAware},
				Warnings: []string{"predicted-latency-producer predictInPrepareData false leaves the slo block off: upstream then predicts nothing, and every pod is picked as if no objective were stated"},
			},
		},
		"the plugins that act on predictions without a predictor warn": {
			in: latencyDoc("- type: queue-scorer\n- type: slo-headroom-tier-filter\n- type: latency-slo-admitter\n", "  - pluginRef: queue-scorer\n  - pluginRef: slo-headroom-tier-filter\n"),
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}},
				Warnings: []string{
					"slo-headroom-tier-filter (slo-headroom-tier-filter) has no effect: upstream it acts on the predictions of predicted-latency-producer, which plugins do not declare",
					"latency-slo-admitter (latency-slo-admitter) has no effect: upstream it acts on the predictions of predicted-latency-producer, which plugins do not declare",
				},
			},
		},
		"a producer in plugins predicts for the admitter though no profile lists it, as upstream": {
			in: latencyDoc("- type: predicted-latency-producer\n- type: latency-slo-admitter\n- type: queue-scorer\n", "  - pluginRef: queue-scorer\n"),
			want: File{Policy: policy.Config{
				Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				SLO: &policy.SLOConfig{ExploreNegative: ptr(0), Admission: true, WholeResponse: true},
			}},
		},
		"a producer in plugins predicts for the profile's latency pipeline though the profile does not list it": {
			in: latencyDoc("- type: predicted-latency-producer\n  parameters: {sloBufferFactor: 1.5}\n- type: slo-headroom-tier-filter\n- type: latency-scorer\n- type: weighted-random-picker\n",
				"  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n"),
			want: File{Policy: policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{BufferFactor: 1.5, WholeResponse: true}}},
		},
		"two producers neither profile lists: the first in plugins is taken": {
			in: latencyDoc("- {name: a, type: predicted-latency-producer, parameters: {sloBufferFactor: 1.5}}\n- {name: b, type: predicted-latency-producer, parameters: {sloBufferFactor: 3}}\n- type: slo-headroom-tier-filter\n",
				"  - pluginRef: slo-headroom-tier-filter\n"),
			want: File{
				Policy:   policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{BufferFactor: 1.5, WholeResponse: true}},
				Warnings: []string{"b sloBufferFactor 3 has no effect: the slo block takes a's 1.5, the first in plugins"},
			},
		},
		"two predictors that disagree: the first in the profile is taken": {
			in: latencyDoc("- {name: a, type: predicted-latency-producer, parameters: {sloBufferFactor: 1.5}}\n- {name: b, type: predicted-latency-producer, parameters: {sloBufferFactor: 3}}\n- type: slo-headroom-tier-filter\n",
				"  - pluginRef: b\n  - pluginRef: a\n  - pluginRef: slo-headroom-tier-filter\n"),
			want: File{
				Policy:   policy.Config{Name: policy.CacheAware, SLO: &policy.SLOConfig{BufferFactor: 3, WholeResponse: true}},
				Warnings: []string{"a sloBufferFactor 1.5 has no effect: the slo block takes b's 3, the first in the profile"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkParse(t, tc.in, tc.want)
			if err := got.Policy.Default().Validate(); err != nil {
				t.Errorf("the translated policy is refused: %v", err)
			}
		})
	}
}

func TestLatencyPluginsReject(t *testing.T) {
	checkRejects(t, map[string]struct {
		in   string
		want []string
	}{
		"an affinity filter without a predictor": {
			in:   latencyDoc("- type: queue-scorer\n- type: prefix-cache-affinity-filter\n", "  - pluginRef: queue-scorer\n  - pluginRef: prefix-cache-affinity-filter\n"),
			want: []string{"line 5:", `"prefix-cache-affinity-filter" is not supported without a latency predictor (predicted-latency-producer in plugins`, "cacheAware.mode threshold"},
		},
		"the weighted-random picker without a predictor": {
			in:   latencyDoc("- type: queue-scorer\n- type: weighted-random-picker\n", "  - pluginRef: queue-scorer\n"),
			want: []string{"line 5:", `"weighted-random-picker" is not supported`, "power-of-two"},
		},
		"sloBufferFactor 0": {
			in:   latencyDoc("- type: predicted-latency-producer\n  parameters: {sloBufferFactor: 0}\n", "  - pluginRef: predicted-latency-producer\n"),
			want: []string{"line 5:", "predicted-latency-producer sloBufferFactor 0 must be > 0"},
		},
		"sloBufferFactor not a number": {
			in:   latencyDoc("- type: predicted-latency-scorer\n  parameters:\n    sloBufferFactor: lots\n", "  - pluginRef: predicted-latency-scorer\n"),
			want: []string{"line 6:", `sloBufferFactor "lots" is not a number`},
		},
		"a negative weight of predicted-latency-scorer, whose factory checks them": {
			in:   latencyDoc("- type: predicted-latency-scorer\n  parameters: {compositeKVWeight: -1}\n", "  - pluginRef: predicted-latency-scorer\n"),
			want: []string{"line 5:", "predicted-latency-scorer compositeKVWeight -1 must be in [0, ∞)"},
		},
		"latency-scorer's weight not a number": {
			in:   latencyDoc("- type: predicted-latency-producer\n- type: latency-scorer\n  parameters: {ttftWeight: high}\n", "  - pluginRef: latency-scorer\n"),
			want: []string{"line 6:", `latency-scorer ttftWeight "high" is not a number`},
		},
		"epsilonExploreNeg above 1": {
			in:   latencyDoc("- type: slo-headroom-tier-filter\n  parameters: {epsilonExploreNeg: 1.5}\n", "  - pluginRef: slo-headroom-tier-filter\n"),
			want: []string{"line 5:", "slo-headroom-tier-filter epsilonExploreNeg 1.5 must be in [0, 1]"},
		},
		"epsilonExploreNeg a list": {
			in:   latencyDoc("- type: slo-headroom-tier-filter\n  parameters: {epsilonExploreNeg: [0.1]}\n", "  - pluginRef: slo-headroom-tier-filter\n"),
			want: []string{"line 5:", "epsilonExploreNeg must be a single value"},
		},
		"affinityThreshold above 1": {
			in:   latencyDoc("- type: predicted-latency-producer\n- type: prefix-cache-affinity-filter\n  parameters: {affinityThreshold: 2}\n", "  - pluginRef: predicted-latency-producer\n"),
			want: []string{"line 6:", "affinityThreshold 2 must be in (-∞, 1]"},
		},
		"predictInPrepareData not a boolean": {
			in:   latencyDoc("- type: predicted-latency-producer\n  parameters: {predictInPrepareData: maybe}\n", "  - pluginRef: predicted-latency-producer\n"),
			want: []string{"line 5:", `predictInPrepareData "maybe" is not true or false`},
		},
		"maxDecodeTokenSamplesForPrediction negative": {
			in:   latencyDoc("- type: predicted-latency-producer\n  parameters: {maxDecodeTokenSamplesForPrediction: -1}\n", "  - pluginRef: predicted-latency-producer\n"),
			want: []string{"line 5:", "maxDecodeTokenSamplesForPrediction -1 must be ≥ 0"},
		},
	})
}
