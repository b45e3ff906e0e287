package chart

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestIstioLeavesTheKVEventsPortPlain: with TLS to the picker, the
// DestinationRule that has Istio's sidecars speak TLS to the Service keeps
// the kv-events port plain, where the model servers' sidecars carry their
// ZMTP connections; without a listen port, or without TLS, it says nothing
// of ports.
func TestIstioLeavesTheKVEventsPortPlain(t *testing.T) {
	disabled := []any{map[string]any{"port": map[string]any{"number": float64(5557)}, "tls": map[string]any{"mode": "DISABLE"}}}
	for name, tc := range map[string]struct {
		sets  []string
		ports any // the rendered trafficPolicy.portLevelSettings
		tls   any // its trafficPolicy.tls.mode
	}{
		"tls and a listen port": {
			sets:  []string{"tls.enabled=true", "picker.kvEvents.listenPort=5557"},
			ports: disabled, tls: "SIMPLE",
		},
		"tls and the user's own port settings": {
			sets: []string{"tls.enabled=true", "picker.kvEvents.listenPort=5557",
				"provider.istio.destinationRule.trafficPolicy.portLevelSettings[0].port.number=9090",
				"provider.istio.destinationRule.trafficPolicy.portLevelSettings[0].loadBalancer.simple=ROUND_ROBIN"},
			ports: append([]any{map[string]any{"port": map[string]any{"number": float64(9090)}, "loadBalancer": map[string]any{"simple": "ROUND_ROBIN"}}}, disabled...),
			tls:   "SIMPLE",
		},
		"tls, no listen port":   {sets: []string{"tls.enabled=true"}, tls: "SIMPLE"},
		"a listen port, no tls": {sets: []string{"tls.enabled=false", "picker.kvEvents.listenPort=5557"}},
	} {
		t.Run(name, func(t *testing.T) {
			out, errOut, err := render(t, []string{"istio.yaml"}, tc.sets...)
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, errOut)
			}
			m := parseManifest(t, out)
			var rule map[string]any
			for _, u := range m.docs {
				if u.GetKind() == "DestinationRule" {
					rule = u.Object
				}
			}
			if rule == nil {
				t.Fatal("no DestinationRule")
			}
			if diff := cmp.Diff(tc.ports, lookup(rule, "spec", "trafficPolicy", "portLevelSettings")); diff != "" {
				t.Errorf("portLevelSettings (-want +got):\n%s", diff)
			}
			if got := lookup(rule, "spec", "trafficPolicy", "tls", "mode"); got != tc.tls {
				t.Errorf("tls mode %#v, want %#v", got, tc.tls)
			}
		})
	}
}
