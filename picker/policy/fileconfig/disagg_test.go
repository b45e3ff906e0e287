package fileconfig

import (
	"strings"
	"testing"
)

// TestAParserOrReporterInOneProfileIsNoDifference: the parser and the
// request-attribute-reporter pick nothing, so a split whose decode profile
// lists them (as upstream's reporter sample lists both in its profile) and
// whose prefill profile does not is no difference to warn of.
func TestAParserOrReporterInOneProfileIsNoDifference(t *testing.T) {
	doc := pdDoc("- type: openai-parser\n" +
		"- {name: cost, type: request-attribute-reporter, parameters: {attributes: [{key: {name: cost}, expression: usage.completion_tokens}]}}\n" +
		"- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {decodeProfile: decode, prefillDeciderPluginName: always-disagg-pd-decider}\n")
	doc = strings.Replace(doc, "- name: decode\n  plugins:\n", "- name: decode\n  plugins:\n  - pluginRef: openai-parser\n  - pluginRef: cost\n", 1)
	got, err := Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Attributes) != 1 {
		t.Errorf("%d attributes, want the reporter's 1", len(got.Attributes))
	}
	for _, w := range got.Warnings {
		if strings.Contains(w, "weighs") {
			t.Errorf("warned %q", w)
		}
	}
}
