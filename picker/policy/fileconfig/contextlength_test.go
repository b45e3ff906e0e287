package fileconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
)

// tokenizerWarnings are what the scorer sample's tokenizer is warned of.
var tokenizerWarnings = []string{
	"parameters of tokenizer (modelName, udsTokenizerConfig) have no effect: with precise-prefix-cache-scorer, prompts are tokenized by the model servers (/tokenize) for the model each request names",
	"context-length-aware judges a prompt's length as its text's bytes over 4, not by the tokenizer's count: a prompt near a range's bound may be taken for the pods on its other side",
}

// llm-d's context-length-aware becomes the policy's contextLength (its
// label, enableFiltering as the filter) and its profile weight the weighted
// scorer's contextLengthWeight.
func TestContextLengthAwareIsTranslated(t *testing.T) {
	scorer := readSample(t, "llm-d-v0.8.0-context-length-scorer.yaml")
	precise := header + "plugins:\n- type: precise-prefix-cache-scorer\n- type: context-length-aware\n  parameters: {enableFiltering: %s}\n- type: queue-scorer\n"
	cases := map[string]struct {
		in   string
		want File
	}{
		"llm-d's filtering sample": {
			in: readSample(t, "llm-d-v0.8.0-context-length-filter.yaml"),
			want: File{Policy: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{ContextLengthWeight: 1, NoDefaultWeights: true},
				ContextLength:  &policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel, Filter: true},
			}},
		},
		"llm-d's scorer sample, beside its load-aware-scorer": {
			in: scorer,
			want: File{
				Policy: policy.Config{
					Name:           policy.WeightedScorer,
					WeightedScorer: policy.WeightedScorerConfig{ContextLengthWeight: 3, LoadScores: policy.LoadScores{LoadAwareWeight: 1, LoadAwareThreshold: 128}},
					ContextLength:  &policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel},
				},
				Warnings: tokenizerWarnings,
			},
		},
		"no parameters, no profile: the default label, weighted 1": {
			in: header + "plugins:\n- type: context-length-aware\n- type: queue-scorer\n",
			want: File{Policy: policy.Config{
				Name:           policy.WeightedScorer,
				WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, ContextLengthWeight: 1},
				ContextLength:  &policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel},
			}},
		},
		"another label, weighted 0 and filtering: ties broken at random among the pods that take the prompt": {
			in: header + "plugins:\n- type: context-length-aware\n  parameters: {label: example.com/tokens, enableFiltering: true}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: context-length-aware\n    weight: 0\n",
			want: File{Policy: policy.Config{
				Name:          policy.Random,
				ContextLength: &policy.ContextLengthConfig{Label: "example.com/tokens", Filter: true},
			}},
		},
		"defined but in no profile": {
			in:   header + "plugins:\n- type: context-length-aware\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"beside precise-prefix-cache-scorer, filtering": {
			in: strings.Replace(precise, "%s", "true", 1),
			want: File{
				Policy:        policy.Config{Name: policy.CacheAware, ContextLength: &policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel, Filter: true}},
				KVEventsPort:  5557,
				KVEventsTopic: "kv@",
				Warnings:      []string{"the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds"},
			},
		},
		"beside precise-prefix-cache-scorer, not filtering": {
			in: strings.Replace(precise, "%s", "false", 1),
			want: File{
				Policy:        policy.Config{Name: policy.CacheAware},
				KVEventsPort:  5557,
				KVEventsTopic: "kv@",
				Warnings: []string{
					"context-length-aware has no effect beside precise-prefix-cache-scorer without enableFiltering: the cache-aware policy weighs no scores",
					"the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds",
				},
			},
		},
		"a parameter llm-d does not read": {
			in: header + "plugins:\n- type: context-length-aware\n  parameters: {ranges: 0-2048}\n",
			want: File{
				Policy: policy.Config{
					Name:           policy.WeightedScorer,
					WeightedScorer: policy.WeightedScorerConfig{ContextLengthWeight: 1, NoDefaultWeights: true},
					ContextLength:  &policy.ContextLengthConfig{Label: policy.DefaultContextLengthLabel},
				},
				Warnings: []string{"context-length-aware parameter ranges has no effect: it takes label and enableFiltering"},
			},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if err := got.Policy.Default().Validate(); err != nil {
				t.Errorf("the translated policy is invalid: %v", err)
			}
		})
	}
}

// A profile whose only scorer is context-length-aware, as llm-d's filtering
// sample, picks by the context-length score alone, as llm-d does: the
// picker's 2/2/3 queue, KV-cache and prefix weights are not added to it, as
// they are to a contextLengthWeight written by hand.
func TestAContextLengthOnlyProfileWeighsNothingElse(t *testing.T) {
	f, err := Parse([]byte(readSample(t, "llm-d-v0.8.0-context-length-filter.yaml")))
	if err != nil {
		t.Fatal(err)
	}
	got := f.Policy.Default().WeightedScorer
	want := policy.WeightedScorerConfig{ContextLengthWeight: 1, NoDefaultWeights: true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the sample's weights after defaulting (-want +got):\n%s", diff)
	}
	byHand := policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{ContextLengthWeight: 3}}
	want = policy.WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3, ContextLengthWeight: 3}
	if diff := cmp.Diff(want, byHand.Default().WeightedScorer); diff != "" {
		t.Errorf("a contextLengthWeight written by hand after defaulting (-want +got):\n%s", diff)
	}
}

func TestContextLengthAwareRejects(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"an empty label": {
			in:   header + "plugins:\n- type: context-length-aware\n  parameters: {label: \"\"}\n",
			want: []string{"line 5", "label must name a pod label"},
		},
		"enableFiltering not a boolean": {
			in:   header + "plugins:\n- type: context-length-aware\n  parameters:\n    enableFiltering: sometimes\n",
			want: []string{"line 6", `"sometimes"`, "true or false"},
		},
		"two plugins, two labels": {
			in:   header + "plugins:\n- {name: a, type: context-length-aware}\n- {name: b, type: context-length-aware, parameters: {label: example.com/tokens}}\n",
			want: []string{`"a" and "b"`, "example.com/tokens", "one context-length label"},
		},
	}
	checkRejects(t, cases)
}
