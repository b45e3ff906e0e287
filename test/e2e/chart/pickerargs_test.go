package chart

import (
	"flag"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
)

// pickerParse reads the rendered picker's command line as the picker does
// at start (app.Parse), the ConfigMap's config.yaml given inline for the
// --config-file the pod mounts.
func pickerParse(t *testing.T, m manifest) error {
	t.Helper()
	var config string
	for _, cm := range decodeAll[corev1.ConfigMap](t, m, "ConfigMap") {
		if c, ok := cm.Data["config.yaml"]; ok {
			config = c
		}
	}
	var args []string
	for _, a := range pickerArgs(t, m) {
		if strings.HasPrefix(a, "--config-file=") {
			a = "--config-text=" + config
		}
		args = append(args, a)
	}
	_, err := app.Parse(flag.NewFlagSet("inferpick", flag.ContinueOnError), args)
	return err
}

// TestBodyBudgets checks that the request-body bounds reach the picker as
// a pair it takes: the buffer for all streams holds at least one largest
// body. A pair it would refuse at start fails the render, naming both
// values.
func TestBodyBudgets(t *testing.T) {
	tests := map[string]struct {
		sets     []string
		wantFail string
	}{
		"defaults": {},
		"both raised": {
			sets: []string{"picker.maxRequestBodyBytes=536870912", "picker.maxBufferedBodyBytes=1073741824"},
		},
		"a smaller largest body": {
			sets: []string{"picker.maxRequestBodyBytes=1048576"},
		},
		"a largest body over the default buffer": {
			sets:     []string{"picker.maxRequestBodyBytes=536870912"},
			wantFail: "picker.maxBufferedBodyBytes 0 (the picker's 268435456) is under picker.maxRequestBodyBytes 536870912",
		},
		"a buffer under the default largest body": {
			sets:     []string{"picker.maxBufferedBodyBytes=8388608"},
			wantFail: "picker.maxBufferedBodyBytes 8388608 is under picker.maxRequestBodyBytes 0 (the picker's 16777216)",
		},
		"a buffer under the largest body": {
			sets:     []string{"picker.maxRequestBodyBytes=33554432", "picker.maxBufferedBodyBytes=16777216"},
			wantFail: "picker.maxBufferedBodyBytes 16777216 is under picker.maxRequestBodyBytes 33554432",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, ok := renderUnless(t, tc.wantFail, tc.sets...)
			if !ok {
				return
			}
			if err := pickerParse(t, parseManifest(t, out)); err != nil {
				t.Errorf("the picker refuses the rendered args: %v", err)
			}
		})
	}
}
