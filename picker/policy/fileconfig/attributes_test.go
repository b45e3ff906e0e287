package fileconfig

import (
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
)

func TestParseNativeAttributes(t *testing.T) {
	for name, tc := range map[string]struct {
		in   string
		want []attr
	}{
		"a list, in the order of the document": {
			in: "policy: {name: least-load}\nattributes:\n" +
				"- {namespace: billing, name: prompt, expression: usage.prompt_tokens}\n" +
				"- name: x-gateway-inference-request-cost\n  expression: usage.completion_tokens * 2.0\n  condition: has(usage.completion_tokens)\n",
			want: []attr{
				{"billing", "prompt", "usage.prompt_tokens", ""},
				{"envoy.lb", "x-gateway-inference-request-cost", "usage.completion_tokens * 2.0", "has(usage.completion_tokens)"},
			},
		},
		"the namespace defaults to envoy.lb, the condition to none": {
			in:   "attributes:\n- {name: cost, expression: usage.total_tokens}\n",
			want: []attr{{"envoy.lb", "cost", "usage.total_tokens", ""}},
		},
		"a null namespace and condition are the defaults": {
			in:   "attributes:\n- {namespace: ~, name: cost, expression: usage.total_tokens, condition: null}\n",
			want: []attr{{"envoy.lb", "cost", "usage.total_tokens", ""}},
		},
		"an empty list": {
			in: "policy: {}\nattributes: []\n",
		},
		"a null list": {
			in: "attributes: ~\n",
		},
	} {
		t.Run(name, func(t *testing.T) {
			checkAttributes(t, tc.in, tc.want)
		})
	}
}

// The policy beside the attributes is read as without them.
func TestNativeAttributesKeepThePolicy(t *testing.T) {
	f, err := Parse([]byte("policy:\n  name: least-load\nattributes:\n- {name: cost, expression: usage.total_tokens}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if f.Policy.Name != policy.LeastLoad || len(f.Attributes) != 1 {
		t.Errorf("policy %q and %d attributes, want %q and 1", f.Policy.Name, len(f.Attributes), policy.LeastLoad)
	}
}

func TestParseNativeAttributesRejects(t *testing.T) {
	checkRejects(t, map[string]struct {
		in   string
		want []string
	}{
		"a function in the expression": {
			in:   "attributes:\n- name: a\n  expression: size(usage)\n",
			want: []string{"line 3", "attributes[0] expression: column 1: function size() is not supported"},
		},
		"a condition that gives a number, in the second item": {
			in:   "attributes:\n- {name: a, expression: usage.prompt_tokens}\n- name: b\n  expression: usage.total_tokens\n  condition: 1 + 1\n",
			want: []string{"line 5", "attributes[1] condition", "the condition must give a bool"},
		},
		"an expression that gives a bool": {
			in:   "attributes:\n- {name: a, expression: usage.prompt_tokens > 1}\n",
			want: []string{"line 2", "attributes[0] expression", "must give a number"},
		},
		"a field the usage does not have": {
			in:   "attributes:\n- {name: a, expression: usage.prompt_token_details.cached_tokens}\n",
			want: []string{"line 2", "attributes[0] expression", "unknown field usage.prompt_token_details"},
		},
		"an unknown field": {
			in:   "attributes:\n- {name: a, expression: usage.prompt_tokens, condtion: 'false'}\n",
			want: []string{"line 2", `unknown attributes[0] field "condtion"`, "namespace, name, expression and condition"},
		},
		"upstream's key form": {
			in:   "attributes:\n- key: {name: a}\n  expression: usage.prompt_tokens\n",
			want: []string{"line 2", `unknown attributes[0] field "key"`},
		},
		"no name": {
			in:   "attributes:\n- {namespace: x, expression: usage.prompt_tokens}\n",
			want: []string{"line 2", "attributes[0] name is empty"},
		},
		"no expression": {
			in:   "attributes:\n- {name: a}\n",
			want: []string{"line 2", "attributes[0] expression is empty"},
		},
		"a mapping for the namespace": {
			in:   "attributes:\n- name: a\n  namespace: {x: 1}\n  expression: usage.prompt_tokens\n",
			want: []string{"line 3", "attributes[0] namespace must be a string"},
		},
		"a mapping, not a list": {
			in:   "attributes:\n  name: a\n",
			want: []string{"line 2", "attributes must be a list"},
		},
		"a string item": {
			in:   "attributes:\n- usage.prompt_tokens\n",
			want: []string{"line 2", "attributes[0] must be a mapping"},
		},
		"one key twice": {
			in:   "attributes:\n- {namespace: billing, name: cost, expression: usage.prompt_tokens}\n- {name: other, expression: usage.total_tokens}\n- {namespace: billing, name: cost, expression: usage.total_tokens, condition: usage.completion_tokens > 0.0}\n",
			want: []string{"line 4", "attributes[2] reports billing/cost, as line 2 already does", "one value per key"},
		},
		"envoy.lb given and omitted is one key": {
			in:   "attributes:\n- {name: cost, expression: usage.prompt_tokens}\n- {namespace: envoy.lb, name: cost, expression: usage.total_tokens}\n",
			want: []string{"line 3", "attributes[1] reports envoy.lb/cost, as line 2 already does"},
		},
		"an unknown top-level field beside them": {
			in:   "attributes: []\nattribute: []\n",
			want: []string{"line 2", "field attribute not found"},
		},
	})
}
