package fileconfig

import (
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// The charts' default configurations are kept with the binary's tests,
// which start inferpick with them.
const chartData = "../../../cmd/inferpick/app/testdata"

func readChartConfig(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(chartData, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

// readSample reads one of llm-d's sample configurations kept in testdata.
func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pdDoc is a prefill/decode configuration in the shape of llm-d's samples:
// two scorers, the stage filters and the picker, then the plugins given
// (from line 9: a handler, its decider); a prefill and a decode profile,
// each of its filter, the picker, prefix-cache-scorer weighted 2 and
// queue-scorer.
func pdDoc(plugins string) string {
	return header + "plugins:\n- type: prefix-cache-scorer\n- type: queue-scorer\n- type: prefill-filter\n- type: decode-filter\n- type: max-score-picker\n" +
		plugins + pdProfiles
}

const pdProfiles = "schedulingProfiles:\n" +
	"- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n" +
	"- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n"

// pdPolicy is what pdDoc's decode profile becomes, prefilling apart from
// minUncached tokens on.
func pdPolicy(minUncached int) policy.Config {
	return policy.Config{
		Name:           policy.WeightedScorer,
		WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 2},
		Disaggregation: &policy.DisaggregationConfig{MinUncachedTokens: minUncached},
	}
}

// Warnings of llm-d's P/D samples that are not about P/D.
const (
	prepareDataWarning  = "featureGate prepareDataPlugins has no effect: it turned on upstream's data-preparing plugins (v1.3 and v1.4), such as the prefix match llm-d's prefill deciders read; the picker keeps its prefix index itself"
	prefixParamsWarning = "parameters of prefix-cache-scorer have no effect: the prefix index uses 64-byte blocks and sizes itself from vllm:cache_config_info"
)

func TestParse(t *testing.T) {
	chartDefault := File{
		Policy:      policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 2, KVWeight: 2, PrefixWeight: 3}},
		MetricsPath: "/metrics",
	}
	cases := map[string]struct {
		in   string
		want File
	}{
		"upstream inferencepool chart default": {
			in:   readChartConfig(t, "gie-v1.5.0-default-plugins.yaml"),
			want: chartDefault,
		},
		"llm-d router chart default": {
			in:   readChartConfig(t, "llm-d-router-default-plugins.yaml"),
			want: chartDefault,
		},
		"inferpick's own document": {
			in:   "policy:\n  name: cache-aware\n  metricsStaleness: 150ms\n  cacheAware:\n    mode: threshold\n",
			want: File{Policy: policy.Config{Name: policy.CacheAware, MetricsStaleness: policy.Duration{Duration: 150 * time.Millisecond}, CacheAware: policy.CacheAwareConfig{Mode: policy.ModeThreshold}}},
		},
		"inferpick's own document: the load scores": {
			in: "policy:\n  name: weighted-scorer\n  weightedScorer:\n    queueWeight: 1\n    activeRequestWeight: 2\n    activeRequest: {idleThreshold: 1, maxBusyScore: 1}\n    runningRequestsWeight: 1\n    loadAwareWeight: 1\n    loadAwareThreshold: 64\n    noHitLRUWeight: 1\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, LoadScores: policy.LoadScores{
				ActiveRequestWeight: 2, ActiveRequest: policy.ActiveRequestScore{IdleThreshold: 1, MaxBusyScore: 1},
				RunningWeight: 1, LoadAwareWeight: 1, LoadAwareThreshold: 64, NoHitLRUWeight: 1}}}},
		},
		"empty document": {in: "", want: File{}},
		"named plugins, weights default to 1, picker and handler": {
			in: header + `plugins:
- {name: q, type: queue-scorer}
- {name: p, type: prefix-cache-scorer, parameters: {blockSize: 16}}
- type: max-score-picker
- type: single-profile-handler
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: q
  - pluginRef: p
    weight: 5
  - pluginRef: max-score-picker
`,
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 5}},
				Warnings: []string{"parameters of prefix-cache-scorer have no effect: the prefix index uses 64-byte blocks and sizes itself from vllm:cache_config_info"},
			},
		},
		"no schedulingProfiles: upstream's default profile of every plugin, each scorer weighted 1": {
			in: header + "plugins:\n- type: queue-scorer\n- type: kv-cache-utilization-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 2}\n- type: metrics-data-source\n",
			want: File{
				Policy:       policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, KVWeight: 1}},
				MaxEndpoints: 2,
			},
		},
		"only a picker: ties broken at random": {
			in:   header + "plugins:\n- type: max-score-picker\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: max-score-picker\n",
			want: File{Policy: policy.Config{Name: policy.Random}},
		},
		"lora scorer weighs LoRA affinity": {
			in: header + "plugins:\n- type: queue-scorer\n- type: lora-affinity-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: lora-affinity-scorer\n    weight: 2\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, LoRAWeight: 2}},
			},
		},
		"session scorer beside other scorers: a preference weighted as in the profile": {
			in: header + "plugins:\n- type: queue-scorer\n- {name: s, type: session-affinity-scorer, parameters: {headerName: X-Conversation}}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: s\n    weight: 3\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer,
				WeightedScorer:  policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 3},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-conversation", Mode: policy.SessionPrefer}}},
		},
		// llm-d's versions of the scorer spell its parameters as the filter
		// does: strategy, encodedEndpointHeaderConfig, sessionIdConfig.
		"session scorer with the filter's spelling of the token's header": {
			in: header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-scorer, parameters: {strategy: encoded_endpoint_header, encodedEndpointHeaderConfig: {header: x-s}}}\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer,
				WeightedScorer:  policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 1},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-s", Mode: policy.SessionPrefer}}},
		},
		"session scorer with strategy session_id_header and its headerName": {
			in: header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-scorer, parameters: {strategy: session_id_header, headerName: x-agent}}\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer,
				WeightedScorer:  policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 1},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-agent", Key: policy.SessionID, Mode: policy.SessionPrefer}}},
		},
		"session scorer with strategy session_id and a sessionIdConfig source": {
			in: header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-scorer, parameters: {strategy: session_id, sessionIdConfig: {sources: [{header: x-agent}]}}}\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer,
				WeightedScorer:  policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 1},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-agent", Key: policy.SessionID, Mode: policy.SessionPrefer}}},
		},
		"session scorer alone, as in upstream's default profile: a pin, the other pods tie": {
			in: header + "plugins:\n- type: session-affinity-scorer\n  parameters: {algorithm: encoded_endpoint_header}\n- type: max-score-picker\n",
			want: File{Policy: policy.Config{Name: policy.Random,
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-token", Mode: policy.SessionPin}}},
		},
		"session filter: a pin with its header": {
			in: header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-filter, parameters: {strategy: encoded_endpoint_header, encodedEndpointHeaderConfig: {header: x-pin}}}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: session-affinity-filter\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer,
				WeightedScorer:  policy.WeightedScorerConfig{QueueWeight: 1},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-pin", Mode: policy.SessionPin}}},
		},
		"session filter and scorer on one header: the filter's pin, the scorer warns": {
			in: header + "plugins:\n- type: queue-scorer\n- type: session-affinity-filter\n- type: session-affinity-scorer\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
					SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-token", Mode: policy.SessionPin}},
				Warnings: []string{"session-affinity-scorer has no effect beside session-affinity-filter: the filter already keeps the session on its pod"},
			},
		},
		"session scorer beside precise-prefix-cache-scorer: a pin, with a warning": {
			in: header + "plugins:\n- type: precise-prefix-cache-scorer\n- type: session-affinity-scorer\n",
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware, SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-token", Mode: policy.SessionPin}},
				KVEventsPort: 5557, KVEventsTopic: "kv@",
				Warnings: []string{"session-affinity-scorer becomes a pin beside precise-prefix-cache-scorer: the cache-aware policy weighs no scores, so a session goes to its pod unless that pod is saturated (as session-affinity-filter does)"},
			},
		},
		"session scorer's stateful parameters with the stateless algorithm: no effect": {
			in: header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-scorer, parameters: {evictionTtlSeconds: 60, missThreshold: 2}}\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 1},
					SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-token", Mode: policy.SessionPrefer}},
				Warnings: []string{"session-affinity-scorer parameters evictionTtlSeconds, missThreshold have no effect: they tune the session_id_header algorithm"},
			},
		},
		"session id filter, llm-d's example: a pin on ids, the table's parameters warn": {
			in: header + "plugins:\n- type: queue-scorer\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n" +
				"      sources:\n        - header: X-Agent-Session\n      evictionTtlSeconds: 300\n      evictionSweepSeconds: 10\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
					SessionAffinity: &policy.SessionAffinityConfig{Header: "x-agent-session", Key: policy.SessionID, Mode: policy.SessionPin}},
				Warnings: []string{"session-affinity-filter sessionIdConfig evictionTtlSeconds, evictionSweepSeconds have no effect: " +
					"the picker keeps no table of sessions to evict or migrate: a session id goes to the pod its rendezvous hash names, on every replica alike"},
			},
		},
		"session id filter with llm-d's default source": {
			in: header + "plugins:\n- type: session-affinity-filter\n  parameters: {strategy: session_id}\n- type: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-id", Key: policy.SessionID, Mode: policy.SessionPin}}},
		},
		"session id filter: the token's block warns": {
			in: header + "plugins:\n- type: session-affinity-filter\n  parameters: {strategy: session_id, encodedEndpointHeaderConfig: {header: x-t}, sessionIdConfig: {sources: [{header: x-s}]}}\n- type: queue-scorer\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
					SessionAffinity: &policy.SessionAffinityConfig{Header: "x-s", Key: policy.SessionID, Mode: policy.SessionPin}},
				Warnings: []string{"session-affinity-filter encodedEndpointHeaderConfig has no effect: it configures the encoded_endpoint_header strategy"},
			},
		},
		"session id scorer beside other scorers: ids weighed, the table's parameters warn": {
			in: header + "plugins:\n- type: queue-scorer\n- {name: s, type: session-affinity-scorer, parameters: {algorithm: session_id_header, headerName: x-session-id, evictionTtlSeconds: 600, missThreshold: 3}}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: s\n    weight: 2\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, SessionWeight: 2},
					SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-id", Key: policy.SessionID, Mode: policy.SessionPrefer}},
				Warnings: []string{"session-affinity-scorer parameters evictionTtlSeconds, missThreshold have no effect: " +
					"the picker keeps no table of sessions to evict or migrate: a session id goes to the pod its rendezvous hash names, on every replica alike"},
			},
		},
		"session id scorer alone, on llm-d's default header": {
			in: header + "plugins:\n- type: session-affinity-scorer\n  parameters: {algorithm: session_id_header}\n- type: max-score-picker\n",
			want: File{Policy: policy.Config{Name: policy.Random,
				SessionAffinity: &policy.SessionAffinityConfig{Header: "x-session-token", Key: policy.SessionID, Mode: policy.SessionPin}}},
		},
		"session plugins outside the profile: no session affinity": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: session-affinity-filter\n" + "schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"saturation thresholds from the utilization detector": {
			in: header + `plugins:
- type: kv-cache-utilization-scorer
- name: sat
  type: utilization-detector
  parameters: {queueDepthThreshold: 7, kvCacheUtilThreshold: 0.9, metricsStalenessThreshold: 300ms}
saturationDetector:
  pluginRef: sat
schedulingProfiles:
- name: d
  plugins:
  - pluginRef: kv-cache-utilization-scorer
    weight: 1.5
`,
			want: File{Policy: policy.Config{
				Name: policy.WeightedScorer, QueueThreshold: 7, KVCacheThreshold: 0.9,
				MetricsStaleness: policy.Duration{Duration: 300 * time.Millisecond},
				WeightedScorer:   policy.WeightedScorerConfig{KVWeight: 1.5},
			}},
		},
		"a saturationDetector naming the utilization-detector that plugins leave out: upstream's default detector": {
			in:   header + "plugins:\n- type: queue-scorer\nsaturationDetector:\n  pluginRef: utilization-detector\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"saturationDetector, parser and requestHandler before plugins: key order does not matter, as upstream": {
			in: header + `saturationDetector:
  pluginRef: sat
parser:
  pluginRef: p
requestHandler:
  parsers:
  - pluginRef: p
plugins:
- type: queue-scorer
- {name: sat, type: utilization-detector, parameters: {queueDepthThreshold: 8}}
- {name: p, type: openai-parser}
schedulingProfiles:
- name: d
  plugins:
  - pluginRef: queue-scorer
`,
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, QueueThreshold: 8, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"llm-d's precise prefix-cache scorer: cache-aware on the pods' KV-cache events": {
			in: "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" + `plugins:
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {blockSize: 64, hashSeed: "42"}
    indexerConfig:
      tokenizersPoolConfig: {modelName: Qwen/Qwen3-32B}
    kvEventsConfig:
      topicFilter: "kv@"
      concurrency: 4
      discoverPods: true
      podDiscoveryConfig: {socketPort: 5556}
- type: queue-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: precise-prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
  - pluginRef: max-score-picker
`,
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware},
				KVEventsPort: 5556, KVEventsTopic: "kv@",
				Warnings: []string{
					"tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect: the KV-event index keys a block by its token ids (no hash seed to match), takes the block size from the events and tokenizes prompts on the model servers (/tokenize)",
					"the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds",
				},
			},
		},
		"precise prefix-cache scorer with llm-d's defaults": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: precise-prefix-cache-scorer\n",
			want: File{Policy: policy.Config{Name: policy.CacheAware}, KVEventsPort: 5557, KVEventsTopic: "kv@"},
		},
		"llm-d v0.8.0's KV-cache sample: the pods connect to zmqEndpoint, and are dialled too (discoverPods defaults to true)": {
			in: readSample(t, "llm-d-v0.8.0-sim-epp-kvcache-config.yaml"),
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware},
				KVEventsPort: 5557, KVEventsTopic: "kv@", KVEventsListen: ":5557",
				Warnings: []string{
					"tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect: the KV-event index keys a block by its token ids (no hash seed to match), takes the block size from the events and tokenizes prompts on the model servers (/tokenize)",
				},
			},
		},
		"zmqEndpoint with discoverPods false: listen only": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {discoverPods: false, zmqEndpoint: \"tcp://*:5600\", topicFilter: \"kv@\"}\n",
			want: File{Policy: policy.Config{Name: policy.CacheAware}, KVEventsTopic: "kv@", KVEventsListen: ":5600"},
		},
		"discoverPods false without zmqEndpoint: no pod is dialled and nothing listens, as llm-d subscribes to nothing": {
			in: header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {discoverPods: false, podDiscoveryConfig: {socketPort: 5556}}\n",
			want: File{
				Policy: policy.Config{Name: policy.CacheAware}, KVEventsTopic: "kv@",
				Warnings: []string{"kvEventsConfig with discoverPods false and no zmqEndpoint reads no KV-cache events, as llm-d's scorer subscribes to nothing then: the cache-aware policy goes by the prefixes the picker routed itself (set zmqEndpoint, or discoverPods true, to read the pods' events)"},
			},
		},
		"zmqEndpoint hosts: every address is listened on": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {zmqEndpoint: \"tcp://[::]:5601\", podDiscoveryConfig: {socketPort: 5556}}\n",
			want: File{Policy: policy.Config{Name: policy.CacheAware}, KVEventsPort: 5556, KVEventsTopic: "kv@", KVEventsListen: ":5601"},
		},
		"zmqEndpoint naming the picker's Service": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {zmqEndpoint: \"tcp://epp.llm-d.svc:5557\"}\n",
			want: File{Policy: policy.Config{Name: policy.CacheAware}, KVEventsPort: 5557, KVEventsTopic: "kv@", KVEventsListen: ":5557"},
		},
		"the max-score picker's maxNumOfEndpoints: how many endpoints the gateway is given": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 3}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}, MaxEndpoints: 3},
		},
		"a max-score picker the profile leaves out still lists its maxNumOfEndpoints, as upstream adds it to the profile": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 5}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}, MaxEndpoints: 5},
		},
		"maxNumOfEndpoints under 1 is 1, as upstream takes it": {
			in: header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 0}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}, MaxEndpoints: 1,
				Warnings: []string{"max-score-picker maxNumOfEndpoints 0 is taken as 1, as upstream does: the primary endpoint alone, no fallback"},
			},
		},
		"parameters of a plugin that takes none are reported": {
			in: header + "plugins:\n- type: lora-affinity-scorer\n  parameters: {noSuchParameter: 7}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: lora-affinity-scorer\n",
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{LoRAWeight: 1}},
				Warnings: []string{"parameters of lora-affinity-scorer (noSuchParameter) have no effect: it takes none"},
			},
		},
		"llm-d's sample without P/D: decode-filter keeps the pool's pods, which all decode": {
			in:   readChartConfig(t, "llm-d-v0.8.0-epp-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 2}}},
		},
		"llm-d's precise prefix-cache sample: tokenizer and dataLayer are what the picker does": {
			in: readChartConfig(t, "llm-d-v0.8.0-precise-prefix-cache-config.yaml"),
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware},
				KVEventsPort: 5557, KVEventsTopic: "kv@",
				Warnings: []string{
					"parameters of tokenizer (modelName) have no effect: with precise-prefix-cache-scorer, prompts are tokenized by the model servers (/tokenize) for the model each request names",
					"tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect: the KV-event index keys a block by its token ids (no hash seed to match), takes the block size from the events and tokenizes prompts on the model servers (/tokenize)",
					"the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds",
				},
			},
		},
		"TensorRT-LLM metrics": {
			in: header + "plugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {defaultEngine: triton-tensorrt-llm}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{
				Policy:          policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}},
				ModelServerType: "trtllm",
			},
		},
		"a parser naming the openai-parser that plugins leave out: upstream's default parser": {
			in:   header + "plugins:\n- type: queue-scorer\nparser:\n  pluginRef: openai-parser\nrequestHandler:\n  parsers:\n  - pluginRef: openai-parser\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"flowControl feature gate alone: the queue on, upstream's defaults": {
			in:   header + "featureGates: [flowControl]\n",
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Gate: true}},
		},
		"dataLayer feature gate: a no-op upstream too": {
			in: header + "featureGates: [dataLayer, flowControl]\n",
			want: File{
				Policy:      policy.Config{Name: policy.Random},
				FlowControl: FlowControl{Gate: true},
				Warnings:    []string{"featureGate dataLayer has no effect: upstream turns its data layer on without it, and inferpick scrapes the model servers' metrics itself"},
			},
		},
		"flowControl section: each bound": {
			in: header + `featureGates: [flowControl]
flowControl:
  maxRequests: 2k
  maxBytes: 512Mi
  defaultRequestTTL: 45s
  defaultPriorityBand: {maxRequests: 300, orderingPolicyRef: fcfs-ordering-policy, fairnessPolicyRef: round-robin-fairness-policy}
  usageLimitPolicyPluginRef: static-usage-limit-policy
`,
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Gate: true, Section: true, MaxRequests: 2000, MaxBandRequests: 300, MaxBytes: 512 << 20, MaxWait: 45 * time.Second, Ordering: "fcfs"}},
		},
		"flowControl section: upstream's 0, no bound": {
			in:   header + "flowControl: {maxRequests: 0, maxBytes: 0, defaultRequestTTL: 0s, defaultPriorityBand: {maxRequests: 0}}\n",
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Section: true, MaxRequests: NoRequestBound, MaxBandRequests: NoRequestBound, MaxWait: NoWaitBound}},
		},
		"flowControl section: deadline ordering under upstream's default fairness warns": {
			in: header + "featureGates: [flowControl]\nflowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy}\n",
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Gate: true, Section: true, MaxBandRequests: NoRequestBound, Ordering: "slo-deadline"},
				Warnings: []string{"flowControl.defaultPriorityBand names no fairnessPolicyRef, so upstream's is global-strict-fairness-policy, which has no effect: " +
					"with slo-deadline-ordering-policy the flow-control queue serves each priority's flows round-robin, each flow by earliest deadline (as round-robin-fairness-policy), " +
					"not the earliest deadline across the band; name round-robin-fairness-policy to say what the queue does"}},
		},
		"flowControl section: deadline ordering of every band, by a plugin's name, with round-robin fairness": {
			in: header + `plugins:
- {name: edf, type: slo-deadline-ordering-policy}
flowControl:
  defaultPriorityBand: {orderingPolicyRef: edf, fairnessPolicyRef: round-robin-fairness-policy}
  priorityBands:
  - {priority: 10, orderingPolicyRef: edf, fairnessPolicyRef: round-robin-fairness-policy}
`,
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Section: true, MaxBandRequests: NoRequestBound, Ordering: "slo-deadline"}},
		},
		"flowControl section: deadline ordering with global strict fairness named warns in deadline terms": {
			in: header + "flowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy, fairnessPolicyRef: global-strict-fairness-policy}\n",
			want: File{Policy: policy.Config{Name: policy.Random}, FlowControl: FlowControl{Section: true, MaxBandRequests: NoRequestBound, Ordering: "slo-deadline"},
				Warnings: []string{"flowControl.defaultPriorityBand.fairnessPolicyRef global-strict-fairness-policy has no effect: " +
					"with slo-deadline-ordering-policy the flow-control queue serves each priority's flows round-robin, each flow by earliest deadline (as round-robin-fairness-policy), " +
					"not the earliest deadline across the band"}},
		},
		"flowControl section: priority bands of one request bound, byte bounds and upstream's default fairness warn": {
			in: header + `plugins:
- {name: fair, type: global-strict-fairness-policy}
flowControl:
  priorityBands:
  - {priority: 10, maxRequests: 64, maxBytes: 1Gi, fairnessPolicyRef: fair}
  - {priority: 0, maxRequests: 64}
`,
			want: File{
				Policy:      policy.Config{Name: policy.Random},
				FlowControl: FlowControl{Section: true, MaxBandRequests: 64},
				Warnings: []string{
					"flowControl.priorityBands[0].maxBytes has no effect: inferpick bounds the bytes of all waiting requests together (flowControl.maxBytes, --flow-control-max-bytes), not those of one priority",
					"flowControl.priorityBands[0].fairnessPolicyRef global-strict-fairness-policy has no effect: the flow-control queue serves each priority's flows round-robin, each flow first come, first served (as round-robin-fairness-policy), not oldest request first across flows",
				},
			},
		},
		"llm-d v0.8.0's estimate prefix-cache sample: load-aware-scorer with llm-d's threshold": {
			in: readSample(t, "llm-d-v0.8.0-epp-estimate-prefix-cache-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 1,
				LoadScores: policy.LoadScores{LoadAwareWeight: 1, LoadAwareThreshold: 128}}}},
		},
		"llm-d v0.8.0's no-hit LRU sample: beside precise-prefix-cache-scorer, cache-aware places cold prompts": {
			in: readSample(t, "llm-d-v0.8.0-sim-epp-no-hit-lru.yaml"),
			want: File{
				Policy:       policy.Config{Name: policy.CacheAware},
				KVEventsPort: 5557, KVEventsTopic: "kv@",
				Warnings: []string{
					"tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect: the KV-event index keys a block by its token ids (no hash seed to match), takes the block size from the events and tokenizes prompts on the model servers (/tokenize)",
					"no-hit-lru-scorer lruSize has no effect: each pod's last cold pick is one stamp of the pod's own, with no list of pods to bound",
					"the weights of the scorers beside precise-prefix-cache-scorer have no effect: the cache-aware policy weighs each pod's load against what its cache holds",
					"no-hit-lru-scorer has no effect beside precise-prefix-cache-scorer: the cache-aware policy sends a prompt no pod holds to the least loaded pod, and among pods alike a lone picker takes the one holding the fewest cached blocks, picker replicas the prompt's home (rendezvous hashing of its first blocks, bounded by load), which spreads new prefixes over the pods as the LRU order does",
				},
			},
		},
		"no-hit-lru-scorer beside prefix-cache-scorer: the weighted scorer's no-hit score": {
			in: header + "plugins:\n- type: prefix-cache-scorer\n- type: no-hit-lru-scorer\n  parameters: {prefixPluginName: prefix-cache-scorer, lruSize: 64}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: no-hit-lru-scorer\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 2, LoadScores: policy.LoadScores{NoHitLRUWeight: 1}}},
				Warnings: []string{
					"no-hit-lru-scorer lruSize has no effect: each pod's last cold pick is one stamp of the pod's own, with no list of pods to bound",
					"no-hit-lru-scorer prefixPluginName has no effect: a prompt is cold when no pod holds a block of it in the prefix index the weighted scorer keeps",
				},
			},
		},
		"no-hit-lru-scorer without prefix-cache-scorer: every prompt cold, as upstream": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: no-hit-lru-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, LoadScores: policy.LoadScores{NoHitLRUWeight: 1}}}},
		},
		"no-hit-lru-scorer in a profile without the declared prefix-cache-scorer": {
			in: header + "plugins:\n- type: prefix-cache-scorer\n- type: no-hit-lru-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: no-hit-lru-scorer\n",
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{LoadScores: policy.LoadScores{NoHitLRUWeight: 1}}},
				Warnings: []string{noHitWithoutPrefix},
			},
		},
		"active-request-scorer with llm-d's parameters": {
			in: header + "plugins:\n- type: queue-scorer\n- type: active-request-scorer\n  parameters: {requestTimeout: 30s, idleThreshold: 1, maxBusyScore: 0.5}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: active-request-scorer\n    weight: 2\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, LoadScores: policy.LoadScores{
					ActiveRequestWeight: 2, ActiveRequest: policy.ActiveRequestScore{IdleThreshold: 1, MaxBusyScore: 0.5}}}},
				Warnings: []string{"active-request-scorer requestTimeout 30s has no effect: llm-d stops counting a request in flight that long, where the picker counts each until it ends, released on every exit path (end of stream, error, client gone), so a long request stays counted and none outlives its end"},
			},
		},
		"active-request-scorer parameters out of range, taken as llm-d takes them": {
			in: header + "plugins:\n- type: active-request-scorer\n  parameters: {idleThreshold: -3, maxBusyScore: 1.5}\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{LoadScores: policy.LoadScores{
					ActiveRequestWeight: 1, ActiveRequest: policy.ActiveRequestScore{MaxBusyScore: 1}}}},
				Warnings: []string{
					"active-request-scorer idleThreshold -3 is taken as 0, as llm-d does: only a pod with nothing in flight is idle",
					"active-request-scorer maxBusyScore 1.5 is taken as 1, as llm-d does",
				},
			},
		},
		"running-requests-size-scorer in upstream's default profile": {
			in: header + "plugins:\n- type: queue-scorer\n- type: running-requests-size-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1,
				LoadScores: policy.LoadScores{RunningWeight: 1}}}},
		},
		"upstream v1.5.0's integration config: enableLegacyMetrics reads the metric names of the flags": {
			in:   readSample(t, "gie-v1.5.0-integration-default-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, KVWeight: 1, PrefixWeight: 1, LoRAWeight: 1}}},
		},
		"enableLegacyMetrics beside the data layer's engine and path: both ignored, as upstream": {
			in: header + "featureGates: [enableLegacyMetrics]\nplugins:\n- type: queue-scorer\n- type: metrics-data-source\n  parameters: {path: /stats}\n- type: core-metrics-extractor\n  parameters: {defaultEngine: trtllm-serve}\n",
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}},
				Warnings: []string{
					"core-metrics-extractor defaultEngine trtllm-serve has no effect with featureGate enableLegacyMetrics: upstream then reads the metric names of its flags and ignores the data layer, and so does inferpick (--model-server-type and the per-metric flags such as --total-queued-requests-metric)",
					"metrics-data-source path /stats has no effect with featureGate enableLegacyMetrics: upstream then scrapes the path of its flag and ignores the data layer, and so does inferpick (--model-server-metrics-path)",
				},
			},
		},
		"llm-d v0.8.0's P/D sample: the prefix-based decider's nonCachedTokens is minUncachedTokens": {
			in:   readSample(t, "llm-d-v0.8.0-pd-epp-config.yaml"),
			want: File{Policy: pdPolicy(16), Warnings: []string{prepareDataWarning, prefixParamsWarning}},
		},
		"llm-d v0.8.0's simulator E/P/D sample: chats with media encoded apart": {
			in: readSample(t, "llm-d-v0.8.0-sim-epd-epp-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{MinUncachedTokens: 16, Encode: policy.EncodeMultimodal}},
				Warnings: []string{prepareDataWarning}},
		},
		"an encode stage without a prefill stage: E/PD": {
			in: header + "plugins:\n- type: queue-scorer\n- type: encode-filter\n- type: decode-filter\n- type: always-disagg-multimodal-decider\n- {type: disagg-profile-handler, parameters: {encodeDeciderPluginName: always-disagg-multimodal-decider}}\n" +
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}, {pluginRef: queue-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{PrefillPods: policy.PrefillPodsNone, Encode: policy.EncodeMultimodal}},
				Warnings: []string{`the encode profile "encode"'s plugins "queue-scorer" (queue-scorer) have no effect: the encode pod is the encode pod with room that has the fewest requests in flight`}},
		},
		"an encode profile without an encode decider": {
			in: header + "plugins:\n- type: queue-scorer\n- type: encode-filter\n- type: decode-filter\n- type: disagg-profile-handler\n" +
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}},
				Warnings: []string{`the scheduling profile "encode" has no effect: disagg-profile-handler names no encode decider, so llm-d encodes every request's media on the pod that prefills it`}},
		},
		"llm-d v0.8.0's simulator P/D sample": {
			in:   readSample(t, "llm-d-v0.8.0-sim-pd-epp-config.yaml"),
			want: File{Policy: pdPolicy(16), Warnings: []string{prepareDataWarning, prefixParamsWarning}},
		},
		"llm-d v0.6.0's P/D sample without data parallelism: pd-profile-handler's deciderPluginName": {
			in:   readSample(t, "llm-d-v0.6.0-pd-epp-config.yaml"),
			want: File{Policy: pdPolicy(16), Warnings: []string{prepareDataWarning, prefixParamsWarning}},
		},
		"llm-d v0.3.0's P/D sample: pd-profile-handler's threshold 0 prefills every request apart": {
			in: readSample(t, "llm-d-v0.3.0-pd-epp-config.yaml"),
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 2},
				Disaggregation: &policy.DisaggregationConfig{}}},
		},
		"llm-d v0.3.0's simulator P/D sample: threshold in bytes, rounded up to tokens of 4 bytes": {
			in: readSample(t, "llm-d-v0.3.0-sim-pd-epp-config.yaml"),
			want: File{
				Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{PrefixWeight: 2},
					Disaggregation: &policy.DisaggregationConfig{MinUncachedTokens: 3}},
				Warnings: []string{
					prefixParamsWarning,
					"pd-profile-handler parameters hashBlockSize have no effect: the picker measures what the decode pod holds of a prompt on its own prefix index (64-byte blocks)",
					"pd-profile-handler threshold 10 (bytes of uncached prompt) is taken as minUncachedTokens 3 (4 bytes a token, rounded up): a request is prefilled apart from 12 uncached bytes on",
				},
			},
		},
		"pd-profile-handler's threshold of whole tokens, its prefix plugin reported": {
			in: pdDoc("- type: pd-profile-handler\n  parameters: {threshold: 256, decodeProfile: decode, prefillProfile: prefill, prefixPluginName: prefix-cache-scorer, primaryPort: 0}\n"),
			want: File{Policy: pdPolicy(64), Warnings: []string{
				"pd-profile-handler parameters prefixPluginName have no effect: the picker measures what the decode pod holds of a prompt on its own prefix index (64-byte blocks)",
			}},
		},
		"pd-profile-handler without parameters takes llm-d v0.7's default decider, which plugins has": {
			in:   pdDoc("- {type: prefix-based-pd-decider, parameters: {nonCachedTokens: 32}}\n- type: pd-profile-handler\n"),
			want: File{Policy: pdPolicy(32)},
		},
		"always-disagg-pd-decider: every request prefilled apart": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n"),
			want: File{Policy: pdPolicy(0)},
		},
		"prefix-based decider with nonCachedTokens 0: never prefilled apart": {
			in: pdDoc("- {type: prefix-based-pd-decider, parameters: {nonCachedTokens: 0}}\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: prefix-based-pd-decider}}\n"),
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 2}},
				Warnings: []string{`prefix-based-pd-decider "prefix-based-pd-decider" with nonCachedTokens 0 never prefills apart (llm-d v0.7 on; v0.6 took 0 as every request, which is always-disagg-pd-decider): the prefill profile has no effect`},
			},
		},
		"disagg-profile-handler without deciders: decode alone, the prefill profile reported": {
			in: pdDoc("- type: disagg-profile-handler\n"),
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1, PrefixWeight: 2}},
				Warnings: []string{`the scheduling profile "prefill" has no effect: disagg-profile-handler names no prefill decider, so llm-d prefills every request on its decode pod`},
			},
		},
		"disagg-profile-handler without deciders and with one profile: the single-profile config": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: decode-filter\n- type: disagg-profile-handler\nschedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"a decider without a prefill profile: decode alone, the decider reported": {
			in: header + "plugins:\n- type: queue-scorer\n- type: decode-filter\n- type: always-disagg-pd-decider\n- {type: disagg-profile-handler, parameters: {deciders: {prefill: always-disagg-pd-decider}}}\n" +
				"schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: queue-scorer\n",
			want: File{
				Policy:   policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}},
				Warnings: []string{`disagg-profile-handler's decider "always-disagg-pd-decider" has no effect: there is no scheduling profile "prefill", so every request is prefilled and decoded on one pod`},
			},
		},
		"disagg-profile-handler's flat parameters, profiles of other names; prefillDeciderPluginName outranks deciderPluginName": {
			in: header + "plugins:\n- type: queue-scorer\n- type: prefill-filter\n- type: decode-filter\n- {name: d, type: always-disagg-pd-decider}\n" +
				"- type: disagg-profile-handler\n  parameters: {decodeProfile: dec, prefillProfile: pre, prefillDeciderPluginName: d, deciderPluginName: x}\n" +
				"schedulingProfiles:\n- name: pre\n  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}]\n- name: dec\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1},
				Disaggregation: &policy.DisaggregationConfig{}}},
		},
		"a prefill profile weighing otherwise: one policy picks both pods, with a warning": {
			in: header + "plugins:\n- type: prefix-cache-scorer\n- type: queue-scorer\n- type: prefill-filter\n- type: decode-filter\n- type: always-disagg-pd-decider\n" +
				"- {type: disagg-profile-handler, parameters: {deciders: {prefill: always-disagg-pd-decider}}}\n" +
				"schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: prefill-filter\n  - pluginRef: queue-scorer\n    weight: 3\n" +
				"- name: decode\n  plugins:\n  - pluginRef: decode-filter\n  - pluginRef: prefix-cache-scorer\n    weight: 2\n  - pluginRef: queue-scorer\n",
			want: File{Policy: pdPolicy(0), Warnings: []string{
				`the prefill profile "prefill" weighs queue-scorer 3, the decode profile "decode" prefix-cache-scorer 2, queue-scorer 1: the prefill pod is picked by the same policy as the decode pod, the one the decode profile gives`,
			}},
		},
		"header handlers naming the prefill profile, a session plugin the decode profile": {
			in: pdDoc("- {type: prefill-header-handler, parameters: {prefillProfile: prefill}}\n- {type: disagg-headers-handler, parameters: {prefillProfile: prefill, encodeProfile: encode}}\n" +
				"- {type: session-affinity-filter, parameters: {profileName: decode}}\n" +
				"- type: always-disagg-pd-decider\n- {type: disagg-profile-handler, parameters: {deciders: {prefill: always-disagg-pd-decider}}}\n"),
			want: File{Policy: pdPolicy(0)},
		},
		"openai parser": {
			in:   header + "plugins:\n- type: openai-parser\n- type: queue-scorer\nparser:\n  pluginRef: openai-parser\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		// What upstream's chart renders for inferencePool.modelServerProtocol
		// grpc: the picker reads vLLM's gRPC engine API whichever parser is
		// named.
		"vllmgrpc parser, as upstream's chart names it for a gRPC pool": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: vllmgrpc-parser\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\nparser:\n  pluginRef: vllmgrpc-parser\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
		"both parsers listed, in llm-d's requestHandler and in the profile": {
			in: header + "plugins:\n- type: openai-parser\n- {name: grpc, type: vllmgrpc-parser}\n- type: queue-scorer\n" +
				"requestHandler:\n  parsers:\n  - pluginRef: openai-parser\n  - pluginRef: grpc\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: grpc\n",
			want: File{Policy: policy.Config{Name: policy.WeightedScorer, WeightedScorer: policy.WeightedScorerConfig{QueueWeight: 1}}},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got := checkParse(t, tc.in, tc.want)
			// What Parse returns is a policy inferpick can build.
			if _, err := policy.Build(got.Policy, registry.New()); err != nil {
				t.Errorf("Build: %v", err)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	profile := "schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n"
	cases := map[string]struct {
		in   string
		want []string // what the error must say
	}{
		"unknown field of our own document": {
			in:   "policy:\n  name: random\n  nmae: typo\n",
			want: []string{"line 3", "nmae"},
		},
		"wrong type": {
			in:   "policy:\n  name: random\n  queueThreshold: many\n",
			want: []string{"line 3"},
		},
		"unknown plugin type": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: my-scorer\n" + profile,
			want: []string{"line 5", `"my-scorer"`, "docs/policy.md"},
		},
		"unknown session scorer algorithm": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: session-affinity-scorer\n  parameters: {algorithm: cookie}\n",
			want: []string{"line 6", `"cookie"`, "session_id_header", "encoded_endpoint_header"},
		},
		"unknown session filter strategy": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: sticky\n",
			want: []string{"line 6", `"sticky"`, "session_id", "encoded_endpoint_header"},
		},
		"session id from a request attribute": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n      sources:\n      - attribute: agent-identity\n",
			want: []string{"line 9", `"agent-identity"`, "attribute", "no request attributes"},
		},
		"session id from a header, then an attribute": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n      sources:\n      - header: x-session-id\n      - attribute: agent-identity\n",
			want: []string{"line 9", "2 sources", "one header"},
		},
		"session id from two headers": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n      sources: [{header: x-a}, {header: x-b}]\n",
			want: []string{"line 8", "2 sources", "one header"},
		},
		"session id source with no header": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig:\n      sources: [{header: \"\"}]\n",
			want: []string{"line 8", "names no header"},
		},
		"unknown sessionIdConfig field": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters:\n    strategy: session_id\n    sessionIdConfig: {ttl: 3}\n",
			want: []string{"line 7", `"ttl"`},
		},
		"session filter on ids, scorer on tokens, one header": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters: {strategy: session_id, sessionIdConfig: {sources: [{header: x-session-token}]}}\n- type: session-affinity-scorer\n",
			want: []string{"x-session-token", "a session id", "a session token", "keep one plugin"},
		},
		"session plugin of another profile": {
			in:   header + "plugins:\n- type: session-affinity-scorer\n  parameters: {profileName: prefill}\n",
			want: []string{"line 5", "profileName", "disaggregation"},
		},
		"unknown session scorer parameter": {
			in:   header + "plugins:\n- type: session-affinity-scorer\n  parameters: {header: x-a}\n",
			want: []string{"line 5", `"header"`},
		},
		"unknown session filter header field": {
			in:   header + "plugins:\n- type: session-affinity-filter\n  parameters: {encodedEndpointHeaderConfig: {name: x-a}}\n",
			want: []string{"line 5", `"name"`},
		},
		"session header that is no header": {
			in:   header + "plugins:\n- type: session-affinity-scorer\n  parameters: {headerName: \"x a\"}\n",
			want: []string{"line 4", `"x a"`},
		},
		"session plugins on two headers": {
			in:   header + "plugins:\n- type: session-affinity-filter\n- type: session-affinity-scorer\n  parameters: {headerName: x-other}\n",
			want: []string{"x-session-token", "x-other", "one session header"},
		},
		"upstream plugin with an alternative": {
			in:   header + "plugins:\n- type: token-load-scorer\n",
			want: []string{"line 4", `"token-load-scorer"`, "use active-request-scorer", "tokens in flight"},
		},
		"two load-aware scorers with different thresholds": {
			in:   header + "plugins:\n- {name: a, type: load-aware-scorer}\n- {name: b, type: load-aware-scorer, parameters: {threshold: 16}}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: a\n  - pluginRef: b\n",
			want: []string{"line 10", `"a" and "b"`, "(128, 16)", "one load-aware score"},
		},
		"active-request-scorer idleThreshold that is no number": {
			in:   header + "plugins:\n- type: active-request-scorer\n  parameters: {idleThreshold: some}\n",
			want: []string{"line 5", "idleThreshold", `"some"`},
		},
		"disaggregation profiles": {
			in:   header + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: queue-scorer}]\n- name: decode\n  plugins: [{pluginRef: queue-scorer}]\n",
			want: []string{"line 8", "one profile"},
		},
		"the encode filter outside an encode profile": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: encode-filter\n",
			want: []string{"line 5", `"encode-filter"`, "outside an encode profile"},
		},
		"an encode decider that names no plugin": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    deciders: {prefill: always-disagg-pd-decider, encode: mm}\n"),
			want: []string{"line 12", "encode decider", `"mm"`, "names no plugin"},
		},
		"an encode decider that is a prefill decider": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters:\n    encodeDeciderPluginName: always-disagg-pd-decider\n"),
			want: []string{"line 12", "encode decider", "always-disagg-pd-decider", "always-disagg-multimodal-decider"},
		},
		"an encode profile without the encode filter": {
			in: header + "plugins:\n- type: queue-scorer\n- type: decode-filter\n- type: always-disagg-multimodal-decider\n- {type: disagg-profile-handler, parameters: {profiles: {encode: enc}, deciders: {encode: always-disagg-multimodal-decider}}}\n" +
				"schedulingProfiles:\n- name: enc\n  plugins: [{pluginRef: queue-scorer}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}]\n",
			want: []string{"line 9", `"enc"`, "no encode-filter"},
		},
		"the decode filter in the encode profile": {
			in: header + "plugins:\n- type: encode-filter\n- type: decode-filter\n- type: always-disagg-multimodal-decider\n- {type: disagg-profile-handler, parameters: {deciders: {encode: always-disagg-multimodal-decider}}}\n" +
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}, {pluginRef: decode-filter}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}]\n",
			want: []string{"line 10", `"decode-filter"`, "encode profile"},
		},
		"a header handler's encode profile that is not the handler's": {
			in: header + "plugins:\n- type: encode-filter\n- type: decode-filter\n- type: always-disagg-multimodal-decider\n- {type: disagg-headers-handler, parameters: {encodeProfile: enc}}\n- {type: disagg-profile-handler, parameters: {deciders: {encode: always-disagg-multimodal-decider}}}\n" +
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}]\n- name: decode\n  plugins: [{pluginRef: decode-filter}]\n",
			want: []string{"line 7", `"enc"`, "encode profile"},
		},
		"a profile neither decode nor prefill": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: disagg-profile-handler\nschedulingProfiles:\n- name: decode\n  plugins: [{pluginRef: queue-scorer}]\n- name: other\n  plugins: [{pluginRef: queue-scorer}]\n",
			want: []string{"line 9", `"other"`, "neither"},
		},
		"a profile named as neither stage": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: pd-profile-handler\nschedulingProfiles:\n- name: default\n  plugins: [{pluginRef: queue-scorer}]\n",
			want: []string{"line 7", `"default"`, `"decode"`},
		},
		"no decode profile": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: pd-profile-handler\nschedulingProfiles:\n- name: prefill\n  plugins: [{pluginRef: queue-scorer}]\n",
			want: []string{"line 5", "no decode profile", `"decode"`},
		},
		"a P/D handler without schedulingProfiles": {
			in:   header + "plugins:\n- type: queue-scorer\n- type: decode-filter\n- type: disagg-profile-handler\n",
			want: []string{"line 6", "needs schedulingProfiles"},
		},
		"two P/D handlers": {
			in:   pdDoc("- type: disagg-profile-handler\n- type: pd-profile-handler\n"),
			want: []string{"line 10", "second", "keep one"},
		},
		"unknown disagg-profile-handler parameter": {
			in:   pdDoc("- type: disagg-profile-handler\n  parameters: {threshold: 5}\n"),
			want: []string{"line 10", `"threshold"`},
		},
		"unknown disagg-profile-handler profiles field": {
			in:   pdDoc("- type: disagg-profile-handler\n  parameters: {profiles: {prefil: p}}\n"),
			want: []string{"line 10", `"prefil"`},
		},
		"disagg-profile-handler's flat and nested parameters mixed": {
			in:   pdDoc("- type: disagg-profile-handler\n  parameters:\n    deciders: {prefill: a}\n    decodeProfile: d\n"),
			want: []string{"line 12", "mixes", "one form"},
		},
		"unknown pd-profile-handler parameter": {
			in:   pdDoc("- type: pd-profile-handler\n  parameters: {nonCachedTokens: 5}\n"),
			want: []string{"line 10", `"nonCachedTokens"`},
		},
		"pd-profile-handler's threshold beside deciderPluginName": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: pd-profile-handler\n  parameters: {threshold: 5, deciderPluginName: always-disagg-pd-decider}\n"),
			want: []string{"line 10", "threshold", "deciderPluginName", "keep one"},
		},
		"negative threshold": {
			in:   pdDoc("- type: pd-profile-handler\n  parameters: {threshold: -1}\n"),
			want: []string{"line 10", "threshold", `"-1"`},
		},
		"primaryPort that is no number": {
			in:   pdDoc("- type: pd-profile-handler\n  parameters:\n    primaryPort: ${PRIMARY_PORT}\n"),
			want: []string{"line 11", "primaryPort", `"${PRIMARY_PORT}"`},
		},
		"a prefill decider naming no plugin": {
			in:   pdDoc("- type: disagg-profile-handler\n  parameters:\n    deciders: {prefill: nope}\n"),
			want: []string{"line 11", `"nope"`, "names no plugin"},
		},
		"a prefill decider that is no decider": {
			in:   pdDoc("- type: pd-profile-handler\n  parameters:\n    deciderPluginName: queue-scorer\n"),
			want: []string{"line 11", `"queue-scorer"`, "prefix-based-pd-decider", "always-disagg-pd-decider"},
		},
		"negative nonCachedTokens": {
			in:   pdDoc("- type: prefix-based-pd-decider\n  parameters: {nonCachedTokens: -16}\n"),
			want: []string{"line 10", "nonCachedTokens", `"-16"`},
		},
		"unknown prefix-based-pd-decider parameter": {
			in:   pdDoc("- type: prefix-based-pd-decider\n  parameters: {threshold: 16}\n"),
			want: []string{"line 10", `"threshold"`},
		},
		"prefill-filter in the decode profile": {
			in: header + "plugins:\n- type: prefill-filter\n- type: always-disagg-pd-decider\n- type: pd-profile-handler\n" +
				"schedulingProfiles:\n- name: decode\n  plugins:\n  - pluginRef: prefill-filter\n",
			want: []string{"line 10", `"prefill-filter"`, "outside a prefill profile"},
		},
		"decode-filter in the prefill profile": {
			in: header + "plugins:\n- type: decode-filter\n- type: always-disagg-pd-decider\n- type: pd-profile-handler\n" +
				"schedulingProfiles:\n- name: prefill\n  plugins:\n  - pluginRef: decode-filter\n- name: decode\n  plugins:\n  - pluginRef: decode-filter\n",
			want: []string{"line 10", `"decode-filter"`, "prefill profile"},
		},
		"a header handler naming another prefill profile": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: pd-profile-handler\n- type: prefill-header-handler\n  parameters: {prefillProfile: pre}\n"),
			want: []string{"line 12", `"pre"`, `"prefill"`},
		},
		"unknown header handler parameter": {
			in:   pdDoc("- type: disagg-headers-handler\n  parameters: {header: x-p}\n"),
			want: []string{"line 10", `"header"`},
		},
		"a session plugin naming the prefill profile": {
			in:   pdDoc("- type: always-disagg-pd-decider\n- type: pd-profile-handler\n- type: session-affinity-filter\n  parameters: {profileName: prefill}\n"),
			want: []string{"line 12", "profileName", `"prefill"`, "decode"},
		},
		"dangling pluginRef": {
			in:   header + "plugins:\n- type: max-score-picker\n" + profile,
			want: []string{"line 8", `"queue-scorer"`},
		},
		"negative weight": {
			in:   header + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n    weight: -1\n",
			want: []string{"line 9", "weight"},
		},
		"unknown top-level field": {
			in:   header + "plugns: []\n",
			want: []string{"line 3", `"plugns"`},
		},
		"other kind": {
			in:   "apiVersion: v1\nkind: ConfigMap\n",
			want: []string{"line 2", "ConfigMap"},
		},
		"unsupported api version": {
			in:   "apiVersion: example.com/v9\nkind: EndpointPickerConfig\n",
			want: []string{"line 1", "example.com/v9"},
		},
		"https metrics": {
			in:   header + "plugins:\n- type: metrics-data-source\n  parameters: {scheme: https}\n",
			want: []string{"line 5", "https"},
		},
		"unknown flowControl field": {
			in:   header + "featureGates: [flowControl]\nflowControl:\n  maxRequest: 10\n",
			want: []string{"line 5", `"maxRequest"`, "maxRequests"},
		},
		"bands with different request bounds": {
			in:   header + "flowControl:\n  defaultPriorityBand: {maxRequests: 100}\n  priorityBands:\n  - priority: 10\n    maxRequests: 50\n",
			want: []string{"line 7", "priorityBands[0].maxRequests 50", "defaultPriorityBand.maxRequests 100", "--flow-control-max-band-requests"},
		},
		"a band without a request bound beside one with": {
			in:   header + "flowControl:\n  priorityBands:\n  - {priority: 1, maxRequests: 50}\n  - {priority: 0}\n",
			want: []string{"line 6", "(no bound)", "maxRequests 50"},
		},
		"an ordering policy the queue does not follow": {
			in:   header + "flowControl:\n  defaultPriorityBand: {orderingPolicyRef: edf-ordering-policy}\n",
			want: []string{"line 4", "defaultPriorityBand.orderingPolicyRef", `"edf-ordering-policy"`, "first come, first served"},
		},
		"bands of different orderings": {
			in:   header + "flowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy}\n  priorityBands:\n  - {priority: 10}\n",
			want: []string{"line 6", "priorityBands[0].orderingPolicyRef fcfs-ordering-policy", "defaultPriorityBand.orderingPolicyRef slo-deadline-ordering-policy", "--flow-control-ordering"},
		},
		"deadline ordering of listed priorities alone: upstream's default band is first come, first served": {
			in: header + "featureGates: [flowControl]\nflowControl:\n  priorityBands:\n  - {priority: 10, orderingPolicyRef: slo-deadline-ordering-policy}\n",
			want: []string{"line 6", "priorityBands[0].orderingPolicyRef slo-deadline-ordering-policy", "defaultPriorityBand.orderingPolicyRef fcfs-ordering-policy",
				"--flow-control-ordering", "defaultPriorityBand left out"},
		},
		"a usage limit policy the queue does not follow": {
			in:   header + "flowControl:\n  usageLimitPolicyPluginRef: my-limit\n",
			want: []string{"line 4", "usageLimitPolicyPluginRef", `"my-limit"`},
		},
		"negative maxBytes": {
			in:   header + "flowControl: {maxBytes: -1Gi}\n",
			want: []string{"line 3", "flowControl.maxBytes", "negative"},
		},
		"maxRequests that is no quantity": {
			in:   header + "flowControl: {maxRequests: many}\n",
			want: []string{"line 3", "flowControl.maxRequests", `"many"`},
		},
		"defaultRequestTTL that is no duration": {
			in:   header + "flowControl: {defaultRequestTTL: 30}\n",
			want: []string{"line 3", "defaultRequestTTL", `"30"`},
		},
		"unknown feature gate": {
			in:   header + "featureGates: [prepareData]\n",
			want: []string{"line 3", `"prepareData"`, "flowControl"},
		},
		"KV events over a socket other than TCP": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig:\n      zmqEndpoint: ipc:///tmp/kv\n",
			want: []string{"line 7", "zmqEndpoint", "ipc:///tmp/kv", "tcp://HOST:PORT"},
		},
		"KV events on a zmqEndpoint with no port": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig:\n      zmqEndpoint: tcp://*:0\n",
			want: []string{"line 7", "zmqEndpoint", `port "0" is not from 1 to 65535`},
		},
		"discoverPods that is no boolean": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {discoverPods: sometimes}\n",
			want: []string{"line 6", "discoverPods", `"sometimes"`},
		},
		"KV events on no port": {
			in:   header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig:\n      podDiscoveryConfig: {socketPort: 70000}\n",
			want: []string{"line 7", `podDiscoveryConfig.socketPort: port "70000" is not from 1 to 65535`},
		},
		"maxNumOfEndpoints that is no number": {
			in:   header + "plugins:\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: two}\n",
			want: []string{"line 5", "maxNumOfEndpoints", `"two"`},
		},
		"parameters that are no mapping": {
			in:   header + "plugins:\n- type: queue-scorer\n  parameters: [1, 2]\n",
			want: []string{"line 5", "mapping"},
		},
		"prefill/decode disaggregation": {
			in:   header + "plugins:\n- type: decode-filter\n- type: prefill-filter\n",
			want: []string{"line 5", `"prefill-filter"`, "disaggregation", "decode-filter"},
		},
		"engine the scraper has no names for": {
			in:   header + "plugins:\n- type: core-metrics-extractor\n  parameters: {defaultEngine: tgi}\n",
			want: []string{"line 5", `"tgi"`, "trtllm-serve"},
		},
		"dataLayer source the picker does not stand for": {
			in:   header + "plugins:\n- type: queue-scorer\ndataLayer:\n  sources:\n  - pluginRef: queue-scorer\n" + profile,
			want: []string{"line 7", `"queue-scorer"`, "metrics-data-source"},
		},
		"dataLayer extractor its source does not feed": {
			in: header + "plugins:\n- type: metrics-data-source\n- type: precise-prefix-cache-scorer\ndataLayer:\n  sources:\n" +
				"  - pluginRef: metrics-data-source\n    extractors:\n    - pluginRef: precise-prefix-cache-scorer\n",
			want: []string{"line 10", "precise-prefix-cache-scorer", "core-metrics-extractor"},
		},
		"kvCacheUtilThreshold NaN": {
			in:   header + "plugins:\n- type: utilization-detector\n  parameters:\n    kvCacheUtilThreshold: NaN\n- type: queue-scorer\n" + profile,
			want: []string{"line 6", "kvCacheUtilThreshold", `"NaN"`},
		},
		"kvCacheUtilThreshold above one": {
			in:   header + "plugins:\n- type: utilization-detector\n  parameters: {kvCacheUtilThreshold: 1.5}\n- type: queue-scorer\n" + profile,
			want: []string{"line 5", "kvCacheUtilThreshold", "[0,1]"},
		},
		"a saturationDetector naming no plugin": {
			in:   header + "plugins:\n- type: queue-scorer\nsaturationDetector:\n  pluginRef: sat\n" + profile,
			want: []string{"line 6", `"sat"`},
		},
		"a parser of a kind inferpick does not read": {
			in:   header + "plugins:\n- type: queue-scorer\n- {name: pt, type: passthrough-parser}\nparser:\n  pluginRef: pt\n" + profile,
			want: []string{"line 5", "passthrough-parser", "openai-parser", "vllmgrpc-parser"},
		},
		"a parser naming no plugin": {
			in:   header + "plugins:\n- type: queue-scorer\nparser:\n  pluginRef: my-parser\n" + profile,
			want: []string{"line 6", `"my-parser"`},
		},
		"scalar document": {
			in:   "just text\n",
			want: []string{"line 1", "mapping"},
		},
		"an idleThreshold not whole": {
			in:   header + "plugins:\n- type: active-request-scorer\n  parameters:\n    idleThreshold: 1.5\n",
			want: []string{"line 6: active-request-scorer idleThreshold \"1.5\" is not a whole number"},
		},
		"a load-aware threshold not a number": {
			in:   header + "plugins:\n- type: load-aware-scorer\n  parameters:\n    threshold: [1]\n",
			want: []string{"line 6: load-aware-scorer threshold \"\" is not a whole number"},
		},
		"a maxNumOfEndpoints not whole": {
			in:   header + "plugins:\n- type: max-score-picker\n  parameters:\n    maxNumOfEndpoints: two\n",
			want: []string{"line 6: max-score-picker maxNumOfEndpoints \"two\" is not a whole number"},
		},
	}
	checkRejects(t, cases)
}

// YAML's .nan and .inf decode into the policy's float fields; the policy
// refuses them, naming the field, before anything routes with them.
func TestParsedNonFiniteNumbersAreRefused(t *testing.T) {
	cases := map[string]struct {
		in   string
		want string // the field the error names
	}{
		"blocksPerLoad .nan":    {"policy:\n  cacheAware:\n    blocksPerLoad: .nan\n", "cacheAware.blocksPerLoad"},
		"kvCacheThreshold .nan": {"policy:\n  kvCacheThreshold: .nan\n", "kvCacheThreshold"},
		"prefillWeight .inf":    {"policy:\n  prefillWeight: .inf\n", "prefillWeight"},
		"queueWeight -.inf":     {"policy:\n  name: weighted-scorer\n  weightedScorer:\n    queueWeight: -.inf\n", "weightedScorer.queueWeight"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if _, err := policy.Build(f.Policy, registry.New()); err == nil || !strings.Contains(err.Error(), tc.want+":") {
				t.Errorf("Build error = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// A bare number is a duration in nanoseconds, and a staleness that short
// marks every scrape stale on arrival, turning saturation and the scraped
// load off; it is refused with a hint to write a unit.
func TestMetricsStalenessBareNumber(t *testing.T) {
	cases := map[string]struct {
		in      string
		wantErr []string // what the error must say; none when accepted
	}{
		"bare number":        {in: "policy:\n  metricsStaleness: 2\n", wantErr: []string{"metricsStaleness", `"2s"`}},
		"microseconds":       {in: "policy:\n  metricsStaleness: 500us\n", wantErr: []string{"metricsStaleness", "1ms"}},
		"upstream threshold": {in: header + "plugins:\n- type: utilization-detector\n  parameters: {metricsStalenessThreshold: 5ns}\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n", wantErr: []string{"metricsStaleness", `"2s"`}},
		"one millisecond":    {in: "policy:\n  metricsStaleness: 1ms\n"},
		"nanoseconds of 2s":  {in: "policy:\n  metricsStaleness: 2000000000\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			f, err := Parse([]byte(tc.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			_, err = policy.Build(f.Policy, registry.New())
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Errorf("Build: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("metricsStaleness %v accepted", f.Policy.MetricsStaleness)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestPluginParametersAreUsedOrReported: a parameter given to any plugin
// type the file may name is read, or refused, or logged at start as having
// no effect; none is dropped without a word.
func TestPluginParametersAreUsedOrReported(t *testing.T) {
	for typ := range known {
		t.Run(typ, func(t *testing.T) {
			doc := header + "plugins:\n- type: " + typ + "\n  parameters: {notAParameter: 7}\n- type: queue-scorer\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n"
			f, err := Parse([]byte(doc))
			if err == nil && len(f.Warnings) == 0 {
				t.Errorf("parameter notAParameter of %s accepted with no error and no warning", typ)
			}
		})
	}
}

// FuzzParse checks that any input either fails with an error or yields a
// configuration: it never panics.
func FuzzParse(f *testing.F) {
	f.Add([]byte(header + "plugins:\n- type: queue-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n    weight: 2\n"))
	f.Add([]byte("policy:\n  name: least-load\n"))
	f.Add([]byte(header + "plugins:\n- type: queue-scorer\n- {type: max-score-picker, parameters: {maxNumOfEndpoints: 4}}\n"))
	f.Add([]byte(header + "plugins:\n- {name: s, type: utilization-detector, parameters: {queueDepthThreshold: 3}}\nsaturationDetector: {pluginRef: s}\n"))
	f.Add([]byte(header + "requestHandler:\n  parsers:\n  - pluginRef: p\n"))
	f.Add([]byte(header + "saturationDetector: {pluginRef: s}\nparser: {pluginRef: openai-parser}\nplugins:\n- {name: s, type: utilization-detector}\n"))
	f.Add([]byte(header + "plugins:\n- {type: max-score-picker, parameters: {maxNumOfEndpoints: 2}}\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: max-score-picker\n"))
	f.Add([]byte(header + "plugins:\n- type: metrics-data-source\n- type: core-metrics-extractor\ndataLayer:\n  sources:\n  - pluginRef: metrics-data-source\n    extractors: [{pluginRef: core-metrics-extractor}]\n"))
	f.Add([]byte(header + "plugins:\n- type: queue-scorer\n- {type: session-affinity-scorer, parameters: {headerName: x-s}}\n- type: session-affinity-filter\n  parameters: {encodedEndpointHeaderConfig: {header: x-s}}\n"))
	f.Add([]byte(header + "featureGates: [flowControl, dataLayer]\nflowControl:\n  maxRequests: 1k\n  maxBytes: 1Gi\n  defaultRequestTTL: 1m\n  defaultPriorityBand: {maxRequests: 5, maxBytes: 1M}\n  priorityBands:\n  - {priority: 1, maxRequests: 5, fairnessPolicyRef: round-robin-fairness-policy}\n"))
	f.Add([]byte(pdDoc("- {type: prefix-based-pd-decider, parameters: {nonCachedTokens: 16}}\n- type: disagg-profile-handler\n  parameters: {profiles: {decode: decode, prefill: prefill}, deciders: {prefill: prefix-based-pd-decider}}\n")))
	f.Add([]byte(pdDoc("- type: pd-profile-handler\n  parameters: {threshold: 10, hashBlockSize: 5, primaryPort: 0}\n- {type: prefill-header-handler, parameters: {prefillProfile: prefill}}\n")))
	f.Add([]byte(pdDoc("- {type: prefix-based-pd-decider, parameters: {nonCachedTokens: 16}}\n- type: pd-profile-handler\n  parameters: {primaryPort: 8000, deciderPluginName: prefix-based-pd-decider}\n")))
	f.Add([]byte(pdDoc("- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {decodeProfile: decode, prefillDeciderPluginName: always-disagg-pd-decider}\n")))
	f.Add([]byte(header + "featureGates: [enableLegacyMetrics]\nplugins:\n- {type: active-request-scorer, parameters: {requestTimeout: 1m, idleThreshold: 2, maxBusyScore: 0.5}}\n- {type: load-aware-scorer, parameters: {threshold: 0}}\n- type: running-requests-size-scorer\n- {type: no-hit-lru-scorer, parameters: {lruSize: 8}}\n- {type: core-metrics-extractor, parameters: {defaultEngine: vllm}}\n"))
	f.Add([]byte(header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {zmqEndpoint: \"tcp://*:5557\", discoverPods: false}\n"))
	f.Add([]byte("policy: {name: least-load}\nattributes:\n- {namespace: billing, name: cost, expression: usage.completion_tokens * 2.0, condition: has(usage.completion_tokens)}\n"))
	f.Add([]byte(header + "plugins:\n- {type: by-label, parameters: {label: gpu, validValues: [h100, \"\"], allowsNoLabel: true}}\n- type: by-label-selector\n  parameters:\n    matchLabels: {tier: gold}\n    matchExpressions:\n    - {key: zone, operator: NotIn, values: [c]}\n    - {key: drain, operator: DoesNotExist}\n"))
	f.Add([]byte(pdDoc("- {type: by-label, name: fast, parameters: {label: role, validValues: [prefill]}}\n- type: always-disagg-pd-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {prefill: always-disagg-pd-decider}}\n")))
	f.Add([]byte(header + "plugins:\n- type: prefix-cache-scorer\n- {type: max-score-picker, parameters: {maxNumOfEndpoints: 2}}\n- type: data-parallel-profile-handler\n  parameters: {primaryPort: 8000}\n"))
	f.Add([]byte("policy:\n  dataParallel: {primaryPort: 8000}\n"))
	f.Add([]byte(header + "featureGates: [flowControl]\nflowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy, fairnessPolicyRef: global-strict-fairness-policy}\n  priorityBands:\n  - {priority: 10, orderingPolicyRef: slo-deadline-ordering-policy}\n"))
	f.Add([]byte(latencyDoc("- {type: predicted-latency-producer, parameters: {sloBufferFactor: 1.5, contextTTL: 5m}}\n- {name: s, type: prefix-cache-affinity-filter, parameters: {affinityThreshold: 0.99}}\n- {type: slo-headroom-tier-filter, parameters: {epsilonExploreNeg: 0.02}}\n- type: latency-scorer\n- type: weighted-random-picker\n- type: latency-slo-admitter\n",
		"  - pluginRef: predicted-latency-producer\n  - pluginRef: s\n  - pluginRef: slo-headroom-tier-filter\n  - pluginRef: latency-scorer\n  - pluginRef: weighted-random-picker\n")))
	f.Add([]byte(latencyDoc("- type: predicted-latency-scorer\n  parameters: {sloBufferFactor: 2, epsilonExploreNeg: 0.5, maxSampledTokens: 3}\n", "  - pluginRef: predicted-latency-scorer\n")))
	f.Add([]byte("policy:\n  slo: {bufferFactor: 1.2, exploreNegative: 0, admission: true}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := Parse(data)
		if err != nil {
			return
		}
		for _, a := range got.Attributes {
			if a.Namespace == "" || a.Name == "" || a.Expression == nil {
				t.Fatalf("attribute %+v without a namespace, name or expression accepted from:\n%s", a, data)
			}
		}
		if l := got.KVEventsListen; l != "" {
			if n, err := strconv.ParseUint(strings.TrimPrefix(l, ":"), 10, 16); !strings.HasPrefix(l, ":") || err != nil || n == 0 {
				t.Fatalf("KV events listen address %q accepted from:\n%s", l, data)
			}
		}
		if fc := got.FlowControl; fc.MaxRequests < 0 || fc.MaxBandRequests < 0 || fc.MaxBytes < 0 || fc.MaxWait < 0 {
			t.Fatalf("negative flow-control bound %+v accepted from:\n%s", fc, data)
		}
		if d := got.Policy.Disaggregation; d != nil && d.MinUncachedTokens < 0 {
			t.Fatalf("minUncachedTokens %d accepted from:\n%s", d.MinUncachedTokens, data)
		}
		if got.MaxEndpoints < 0 {
			t.Fatalf("maxNumOfEndpoints %d accepted from:\n%s", got.MaxEndpoints, data)
		}
		if err := got.Policy.Default().Validate(); err != nil && strings.Contains(err.Error(), "session") {
			t.Fatalf("session affinity the policy refuses (%v) accepted from:\n%s", err, data)
		}
		ws := got.Policy.WeightedScorer
		for _, w := range []float64{ws.QueueWeight, ws.KVWeight, ws.PrefixWeight, ws.SessionWeight,
			ws.ActiveRequestWeight, ws.RunningWeight, ws.LoadAwareWeight, ws.NoHitLRUWeight} {
			if !(w >= 0) || math.IsInf(w, 0) {
				t.Fatalf("weight %v accepted from:\n%s", w, data)
			}
		}
		if err := got.Policy.Default().Validate(); err != nil && strings.Contains(err.Error(), "abelFilters[") {
			t.Fatalf("label filter the policy refuses (%v) accepted from:\n%s", err, data)
		}
		if err := got.Policy.Default().Validate(); err != nil && strings.Contains(err.Error(), "weightedScorer.") {
			t.Fatalf("weighted scorer the policy refuses (%v) accepted from:\n%s", err, data)
		}
		if err := got.Policy.Default().Validate(); err != nil && strings.Contains(err.Error(), "slo.") && translated(data) {
			t.Fatalf("slo block the policy refuses (%v) translated from:\n%s", err, data)
		}
	})
}

// translated reports whether data is upstream's EndpointPickerConfig,
// which Parse checks against the policy's rules, where inferpick's own
// document is checked when the policy is built.
func translated(data []byte) bool {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return false
	}
	kind := lookup(root.Content[0], "kind")
	return kind != nil && kind.Value == endpointPickerKind
}

// checkParse checks that Parse reads in as want, and returns what it read.
func checkParse(t *testing.T, in string, want File) File {
	t.Helper()
	got, err := Parse([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
	return got
}

// checkRejects checks that Parse refuses each case's file, in, with an
// error that says each of want.
func checkRejects(t *testing.T, cases map[string]struct {
	in   string
	want []string
}) {
	t.Helper()
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("Parse accepted:\n%s", tc.in)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
