package fileconfig

import (
	"strings"
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
)

// dpDoc is a one-profile document with the data-parallel handler given.
func dpDoc(handler string) string {
	return header + "plugins:\n- type: prefix-cache-scorer\n- type: max-score-picker\n" + handler +
		"schedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n"
}

// dpWarning is the deprecation the handler is read with, on port.
func dpWarning(port string) string {
	return "data-parallel-profile-handler is deprecated in llm-d: Istio 1.28.1 and later route to each rank's port directly, and so does the picker with the ranks' ports in the pool's targetPorts and the handler left out; until then each request goes to its pod's port " + port + ", the rank named in x-data-parallel-host-port"
}

// pdPrimaryPortWarning is the deprecation pd-profile-handler's primaryPort
// is read with, on port.
func pdPrimaryPortWarning(port string) string {
	return "pd-profile-handler primaryPort is deprecated in llm-d: Istio 1.28.1 and later route to each rank's port directly, and so does the picker with the ranks' ports in the pool's targetPorts and primaryPort left out; until then each request goes to its pod's port " + port + ", the rank named in x-data-parallel-host-port"
}

// withDataParallel is c with dataParallel on port.
func withDataParallel(c policy.Config, port int) policy.Config {
	c.DataParallel = &policy.DataParallelConfig{PrimaryPort: port}
	return c
}

func TestParseDataParallelHandler(t *testing.T) {
	prefix2 := policy.WeightedScorerConfig{PrefixWeight: 2}
	cases := map[string]struct {
		in   string
		want File
	}{
		"llm-d v0.8.0's data-parallel sample: the primary port 8000": {
			in: readSample(t, "llm-d-v0.8.0-dp-epp-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: prefix2,
				DataParallel: &policy.DataParallelConfig{PrimaryPort: 8000}}, Warnings: []string{dpWarning("8000")}},
		},
		"no parameters: llm-d's default port 8000": {
			in: dpDoc("- type: data-parallel-profile-handler\n"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: prefix2,
				DataParallel: &policy.DataParallelConfig{PrimaryPort: 8000}}, Warnings: []string{dpWarning("8000")}},
		},
		"another primary port, an unknown parameter reported": {
			in: dpDoc("- type: data-parallel-profile-handler\n  parameters: {primaryPort: 8200, ranks: 4}\n"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: prefix2,
				DataParallel: &policy.DataParallelConfig{PrimaryPort: 8200}}, Warnings: []string{
				"data-parallel-profile-handler parameter ranks has no effect: the handler takes primaryPort only",
				dpWarning("8200"),
			}},
		},
		"primary port 0: each rank's own port, no dataParallel": {
			in: dpDoc("- type: data-parallel-profile-handler\n  parameters: {primaryPort: 0}\n"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: prefix2}, Warnings: []string{
				"data-parallel-profile-handler primaryPort 0 routes each request to the port of the rank picked for it, with no x-data-parallel-host-port: the pool's targetPorts reach each rank",
			}},
		},
		"fallbacks asked for are not listed": {
			in: strings.Replace(dpDoc("- type: data-parallel-profile-handler\n"), "- type: max-score-picker\n", "- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 3}\n", 1),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: prefix2,
				DataParallel: &policy.DataParallelConfig{PrimaryPort: 8000}}, MaxEndpoints: 3, Warnings: []string{
				dpWarning("8000"),
				"max-score-picker maxNumOfEndpoints 3 lists no fallbacks beside data-parallel-profile-handler: x-data-parallel-host-port names the first endpoint's rank alone, which another pod's sidecar would refuse",
			}},
		},
		"llm-d v0.6.0's simulator P/D sample with data parallelism: pd-profile-handler's primaryPort 8000 beside the split": {
			in: readSample(t, "llm-d-v0.6.0-sim-pd-epp-config-dp.yaml"),
			want: File{Policy: withDataParallel(pdPolicy(16), 8000), Warnings: []string{
				prepareDataWarning, prefixParamsWarning, pdPrimaryPortWarning("8000"),
			}},
		},
		"pd-profile-handler's primaryPort without a prefill profile: the decode pod through its sidecar": {
			in: header + "plugins:\n- type: queue-scorer\n- type: pd-profile-handler\n  parameters: {primaryPort: 8200, threshold: 0}\nschedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				DataParallel: &policy.DataParallelConfig{PrimaryPort: 8200}}, Warnings: []string{pdPrimaryPortWarning("8200")}},
		},
		"pd-profile-handler's primaryPort with fallbacks asked for": {
			in: strings.Replace(readSample(t, "llm-d-v0.6.0-sim-pd-epp-config-dp.yaml"), "- type: max-score-picker\n", "- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 2}\n", 1),
			want: File{Policy: withDataParallel(pdPolicy(16), 8000), MaxEndpoints: 2, Warnings: []string{
				prepareDataWarning, prefixParamsWarning, pdPrimaryPortWarning("8000"),
				"max-score-picker maxNumOfEndpoints 2 lists no fallbacks beside pd-profile-handler primaryPort: x-data-parallel-host-port names the first endpoint's rank alone, which another pod's sidecar would refuse",
			}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkParse(t, tc.in, tc.want)
			if _, err := policy.Build(got.Policy, nil); err != nil && !strings.Contains(err.Error(), "registry") {
				t.Errorf("the translated policy does not build: %v", err)
			}
		})
	}
}

func TestParseRejectsDataParallelHandler(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"a second profile": {
			in:   header + "plugins:\n- type: prefix-cache-scorer\n- type: data-parallel-profile-handler\nschedulingProfiles:\n- name: a\n  plugins:\n  - pluginRef: prefix-cache-scorer\n- name: b\n  plugins:\n  - pluginRef: prefix-cache-scorer\n",
			want: []string{"line 10", "a second scheduling profile", "runs one profile"},
		},
		"beside a prefill/decode handler": {
			in:   pdDoc("- type: pd-profile-handler\n- type: data-parallel-profile-handler\n"),
			want: []string{"line 10", "data-parallel-profile-handler beside", `"pd-profile-handler"`, "keep one"},
		},
		"a second data-parallel handler": {
			in:   dpDoc("- {name: a, type: data-parallel-profile-handler}\n- {name: b, type: data-parallel-profile-handler}\n"),
			want: []string{"line 7", "a second data-parallel-profile-handler", `"a"`},
		},
		"a port past 65535": {
			in:   dpDoc("- type: data-parallel-profile-handler\n  parameters: {primaryPort: 70000}\n"),
			want: []string{"line 7", "primaryPort 70000", "1 to 65535"},
		},
		"a negative port": {
			in:   dpDoc("- type: data-parallel-profile-handler\n  parameters: {primaryPort: -1}\n"),
			want: []string{"line 7", "primaryPort -1"},
		},
		"pd-profile-handler's primaryPort past 65535": {
			in:   pdDoc("- type: pd-profile-handler\n  parameters: {primaryPort: 65536}\n"),
			want: []string{"line 10", "pd-profile-handler primaryPort 65536", "1 to 65535"},
		},
		"a port that is no number": {
			in:   dpDoc("- type: data-parallel-profile-handler\n  parameters: {primaryPort: eight}\n"),
			want: []string{"line 7", "primaryPort", `"eight"`},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
