package fileconfig

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/attrexpr"
)

// reporterSample is upstream's sample configuration of the
// request-attribute-reporter (its integration tests' at v1.5.0).
func reporterSample(t *testing.T) string {
	t.Helper()
	return readSample(t, "gie-v1.5.0-request-attribute-reporter-config.yaml")
}

// attr is an attribute as the file gives it.
type attr struct{ Namespace, Name, Expression, Condition string }

func attrsOf(as []attrexpr.Attribute) []attr {
	var out []attr
	for _, a := range as {
		x := attr{Namespace: a.Namespace, Name: a.Name, Expression: a.Expression.String()}
		if a.Condition != nil {
			x.Condition = a.Condition.String()
		}
		out = append(out, x)
	}
	return out
}

// checkAttributes checks that Parse reads in's attributes as want, and
// returns what it read.
func checkAttributes(t *testing.T, in string, want []attr) File {
	t.Helper()
	f, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, attrsOf(f.Attributes)); diff != "" {
		t.Errorf("attributes (-want +got):\n%s", diff)
	}
	return f
}

func TestParseReporter(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want []attr
	}{
		"upstream's sample": {
			in:   reporterSample(t),
			want: []attr{{"envoy.lb", "x-gateway-inference-request-cost", "usage.completion_tokens\n", "has(usage.completion_tokens)"}},
		},
		"the namespace defaults to envoy.lb, the condition to none": {
			in:   header + "plugins:\n- type: request-attribute-reporter\n  parameters:\n    attributes:\n    - key: {name: cost}\n      expression: usage.total_tokens\n",
			want: []attr{{"envoy.lb", "cost", "usage.total_tokens", ""}},
		},
		"a null namespace is envoy.lb": {
			in:   header + "plugins:\n- type: request-attribute-reporter\n  parameters:\n    attributes:\n    - key: {namespace: null, name: cost}\n      expression: usage.total_tokens\n",
			want: []attr{{"envoy.lb", "cost", "usage.total_tokens", ""}},
		},
		"a null condition is none": {
			in:   header + "plugins:\n- type: request-attribute-reporter\n  parameters:\n    attributes:\n    - key: {name: cost}\n      expression: usage.total_tokens\n      condition: ~\n",
			want: []attr{{"envoy.lb", "cost", "usage.total_tokens", ""}},
		},
		"two reporters, in the order of the document": {
			in: header + "plugins:\n" +
				"- name: a\n  type: request-attribute-reporter\n  parameters: {attributes: [{key: {namespace: billing, name: prompt}, expression: usage.prompt_tokens}]}\n" +
				"- name: b\n  type: request-attribute-reporter\n  parameters: {attributes: [{key: {name: out}, expression: usage.completion_tokens * 2.0, condition: usage.completion_tokens > 0}]}\n",
			want: []attr{{"billing", "prompt", "usage.prompt_tokens", ""}, {"envoy.lb", "out", "usage.completion_tokens * 2.0", "usage.completion_tokens > 0"}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := checkAttributes(t, tc.in, tc.want)
			if len(f.Warnings) != 0 {
				t.Errorf("warnings %q, want none", f.Warnings)
			}
		})
	}
}

// TestUpstreamReporterSampleReportsCompletionTokens: upstream's integration
// test expects 10 from its response of 32 prompt and 10 completion tokens.
func TestUpstreamReporterSampleReportsCompletionTokens(t *testing.T) {
	f, err := Parse([]byte(reporterSample(t)))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Attributes) != 1 {
		t.Fatalf("%d attributes, want 1", len(f.Attributes))
	}
	u := attrexpr.Usage{attrexpr.PromptTokens: 32, attrexpr.CompletionTokens: 10, attrexpr.TotalTokens: 42}
	if v, ok, err := f.Attributes[0].Report(&u); v != 10 || !ok || err != nil {
		t.Errorf("Report() = %d, %t, %v; want 10, true, nil", v, ok, err)
	}
}

func TestParseReporterRejects(t *testing.T) {
	plugin := func(params string) string {
		return header + "plugins:\n- type: request-attribute-reporter\n  parameters:\n" + params
	}
	checkRejects(t, map[string]struct {
		in   string
		want []string
	}{
		"no parameters": {
			in:   header + "plugins:\n- type: request-attribute-reporter\n",
			want: []string{"line 4", "exactly one attribute"},
		},
		"two attributes": {
			in:   plugin("    attributes:\n    - {key: {name: a}, expression: usage.prompt_tokens}\n    - {key: {name: b}, expression: usage.prompt_tokens}\n"),
			want: []string{"line 7", "exactly one attribute", "a plugin of its own"},
		},
		"unknown parameter": {
			in:   plugin("    attribute: []\n"),
			want: []string{"line 6", `unknown request-attribute-reporter parameter "attribute"`},
		},
		"unknown attribute field": {
			in:   plugin("    attributes:\n    - {key: {name: a}, expression: usage.prompt_tokens, condtion: 'false'}\n"),
			want: []string{"line 7", `"condtion"`, "key, expression and condition"},
		},
		"unknown key field": {
			in:   plugin("    attributes:\n    - {key: {nmae: a}, expression: usage.prompt_tokens}\n"),
			want: []string{"line 7", `"nmae"`},
		},
		"no name": {
			in:   plugin("    attributes:\n    - {key: {namespace: x}, expression: usage.prompt_tokens}\n"),
			want: []string{"key.name is empty"},
		},
		"a null name": {
			in:   plugin("    attributes:\n    - {key: {name: null}, expression: usage.prompt_tokens}\n"),
			want: []string{"key.name is empty"},
		},
		"a null expression": {
			in:   plugin("    attributes:\n    - {key: {name: a}, expression: ~}\n"),
			want: []string{"expression is empty"},
		},
		"a mapping for the namespace": {
			in:   plugin("    attributes:\n    - key: {namespace: {x: 1}, name: a}\n      expression: usage.prompt_tokens\n"),
			want: []string{"line 7", "key.namespace must be a string"},
		},
		"a list for the condition": {
			in:   plugin("    attributes:\n    - key: {name: a}\n      expression: usage.prompt_tokens\n      condition: [a]\n"),
			want: []string{"line 9", "condition must be a string"},
		},
		"two reporters of one key": {
			in: header + "plugins:\n" +
				"- name: a\n  type: request-attribute-reporter\n  parameters:\n    attributes:\n    - key: {name: cost}\n      expression: usage.prompt_tokens\n" +
				"- name: b\n  type: request-attribute-reporter\n  parameters:\n    attributes:\n    - key: {namespace: envoy.lb, name: cost}\n      expression: usage.total_tokens\n",
			want: []string{"line 14", "reports envoy.lb/cost, as line 8 already does", "one value per key"},
		},
		"attributes twice": {
			in:   plugin("    attributes: [{key: {name: a}, expression: usage.prompt_tokens}]\n    attributes: [{key: {name: b}, expression: usage.total_tokens}]\n"),
			want: []string{"line 7", "attributes is given twice"},
		},
		"no expression": {
			in:   plugin("    attributes:\n    - {key: {name: a}}\n"),
			want: []string{"expression is empty"},
		},
		"a function": {
			in:   plugin("    attributes:\n    - key: {name: a}\n      expression: |\n        size(usage)\n"),
			want: []string{"line 8", "expression: column 1: function size() is not supported", "usage.prompt_tokens"},
		},
		"a string in the condition": {
			in:   plugin("    attributes:\n    - key: {name: a}\n      expression: usage.prompt_tokens\n      condition: \"usage.model == 'x'\"\n"),
			want: []string{"line 9", "condition: column 16: strings are not supported"},
		},
		"a condition that gives a number": {
			in:   plugin("    attributes:\n    - key: {name: a}\n      expression: usage.prompt_tokens\n      condition: 1 + 1\n"),
			want: []string{"line 9", "the condition must give a bool"},
		},
		"a field the usage does not have": {
			in:   plugin("    attributes:\n    - {key: {name: a}, expression: usage.prompt_token_details.cached_tokens}\n"),
			want: []string{"line 7", "unknown field usage.prompt_token_details"},
		},
	})
}
