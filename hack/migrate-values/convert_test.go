package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

func TestConvert(t *testing.T) {
	tests := map[string]struct {
		upstream string
		// want is the inferpick values, as YAML: without metrics, upstream's
		// 10s scrape interval; without --zap-encoder among picker.extraArgs,
		// upstream's --zap-encoder=json first.
		want  string
		notes []string
		// noNotes are notes the conversion must not make.
		noNotes []string
	}{
		"logs stay JSON lines, which the upstream chart asks for with --zap-encoder json": {
			upstream: `
inferenceExtension:
  flags: {v: 2}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {verbosity: 2, extraArgs: [--zap-encoder=json]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"pprof, which the upstream picker serves unless told not to, is reported off": {
			upstream: `
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:  `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{"/debug/pprof/ is no longer served: the upstream picker serves it by default, inferpick's only with --enable-pprof (add it to picker.extraArgs)"},
		},
		"a gRPC pool: h2c, its calls routed as upstream's vllmgrpc-parser routes them": {
			upstream: `
inferencePool:
  modelServerProtocol: grpc
  parser: vllmgrpc-parser
  modelServers: {matchLabels: {app: m}}
`,
			want:    `pool: {appProtocol: kubernetes.io/h2c, selector: {matchLabels: {app: m}}}`,
			noNotes: []string{"modelServerProtocol", "parser"},
		},
		"pprof asked for in the flags": {
			upstream: `
inferenceExtension:
  flags: {enable-pprof: true}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {extraArgs: [--zap-encoder=json, --enable-pprof=true]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"an encoder of the flags wins, as it comes after the upstream chart's": {
			upstream: `
inferenceExtension:
  flags: {zap-encoder: console}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {extraArgs: [--zap-encoder=console]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"monitoring with upstream's default interval scrapes every 10s, not the chart's 30s": {
			upstream: `
inferenceExtension:
  monitoring:
    prometheus: {enabled: true}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
metrics: {serviceMonitor: {enabled: true, interval: 10s}}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"a monitoring interval of the values is kept": {
			upstream: `
inferenceExtension:
  monitoring: {interval: 1m, prometheus: {enabled: true}}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
metrics: {serviceMonitor: {enabled: true, interval: 1m}}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"env as a map, flags by kind": {
			upstream: `
inferenceExtension:
  env:
    B: "2"
    A: 1
  flags:
    v: 4
    secure-serving: "false"
    grpc-keepalive-time: 20s
    pool-name: other
    no-such-flag: x
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env: [{name: A, value: "1"}, {name: B, value: "2"}]
picker: {verbosity: 4, keepalive: {time: 20s}}
tls: {enabled: false}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"--pool-name dropped: the chart sets it from pool.name", "--no-such-flag dropped", "weighted-scorer"},
		},
		"flags the chart sets from its values go to those values, never to extraArgs, which the chart refuses them in": {
			upstream: `
inferenceExtension:
  flags:
    metrics-secure-serving: "true"
    ha-mode: active-passive
    client-ca-path: /etc/ca/ca.crt
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
metrics: {secureServing: true, serviceMonitor: {interval: 10s}}
haMode: active-passive
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"--client-ca-path dropped: the chart sets it from tls.clientCASecretName"},
		},
		"tracing on with the upstream chart's defaults: a plaintext collector at localhost:4317, one request in ten sampled": {
			upstream: `
inferenceExtension:
  tracing: {enabled: true}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env:
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http://localhost:4317"}
- {name: OTEL_TRACES_SAMPLER, value: parentbased_traceidratio}
- {name: OTEL_TRACES_SAMPLER_ARG, value: "0.1"}
picker: {extraArgs: [--tracing=true]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"tracing settings of the values, and an OTEL variable of their env, win over the chart's defaults": {
			upstream: `
inferenceExtension:
  env: [{name: OTEL_TRACES_SAMPLER_ARG, value: "0.5"}]
  tracing:
    enabled: true
    otelExporterEndpoint: http://collector:4317
    sampling: {sampler: always_on}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env:
- {name: OTEL_EXPORTER_OTLP_ENDPOINT, value: "http://collector:4317"}
- {name: OTEL_TRACES_SAMPLER, value: always_on}
- {name: OTEL_TRACES_SAMPLER_ARG, value: "0.5"}
picker: {extraArgs: [--tracing=true]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"quoted flag numbers, which the upstream chart takes, become the integers the chart's schema wants": {
			upstream: `
inferenceExtension:
  flags:
    v: "2"
    model-server-metrics-port: "8001"
    fallbacks: "1"
    max-request-body-bytes: "2000000"
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {verbosity: 2, modelServerMetrics: {port: 8001}, fallbacks: 1, maxRequestBodyBytes: 2000000}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"quoted replicas and ports, which the upstream chart renders unquoted, become integers": {
			upstream: `
inferenceExtension:
  replicas: "2"
  extProcPort: "9102"
  metricsPort: "9190"
inferencePool:
  targetPorts: [{number: "8000"}, {number: 8001}]
  modelServers: {matchLabels: {app: m}}
`,
			want: `
replicas: 2
service: {grpcPort: 9102, metricsPort: 9190}
pool: {selector: {matchLabels: {app: m}}, targetPorts: [8000, 8001]}
`,
		},
		"a flag number of a million or more is passed whole, as the picker's integer flags read it": {
			upstream: `
inferenceExtension:
  flags:
    prefix-index-max-blocks: 2000000
    max-buffered-body-bytes: 1073741824
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {maxBufferedBodyBytes: 1073741824, extraArgs: [--prefix-index-max-blocks=2000000]}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"selector values that are no strings are quoted, as the upstream chart renders them": {
			upstream: `
inferencePool:
  modelServers: {matchLabels: {llm-d.ai/inferenceServing: true, version: 2, app: m}}
`,
			want: `pool: {selector: {matchLabels: {llm-d.ai/inferenceServing: "true", version: "2", app: m}}}`,
		},
		"booleans of the flags spelled as the picker reads them: True, 1, t": {
			upstream: `
inferenceExtension:
  flags:
    secure-serving: "True"
    metrics-endpoint-auth: "1"
    metrics-secure-serving: "t"
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
tls: {enabled: true}
metrics: {auth: true, secureServing: true, serviceMonitor: {interval: 10s}}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"a boolean flag set false is reported: the upstream picker read it as on": {
			upstream: `
inferenceExtension:
  flags: {secure-serving: false, disable-endpoint-subset-filter: "false"}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
tls: {enabled: false}
picker: {extraArgs: [--zap-encoder=json, --disable-endpoint-subset-filter=false]}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{
				`flag --secure-serving false is off now: the upstream chart passed it as two arguments (--secure-serving "false"), which the upstream picker read as on`,
				`flag --disable-endpoint-subset-filter false is off now: the upstream chart passed it as two arguments (--disable-endpoint-subset-filter "false"), which the upstream picker read as on`,
			},
		},
		// The chart's own auth setting is moved over the flag's: the
		// converted release has auth on, as the upstream one had.
		"metrics auth set false in flags but on in monitoring is not reported off": {
			upstream: `
inferenceExtension:
  flags: {metrics-endpoint-auth: false}
  monitoring: {prometheus: {auth: {enabled: true}}}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
metrics: {auth: true, serviceMonitor: {interval: 10s}}
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"metrics-endpoint-auth false is off now"},
		},
		"a boolean flag with a value that is no boolean is reported, not turned off": {
			upstream: `
inferenceExtension:
  flags:
    secure-serving: "yes"
    enable-pprof: "on"
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{
				`flag --secure-serving "yes" dropped: not a boolean (true or false); tls.enabled keeps its default`,
				`flag --enable-pprof "on" dropped: not a boolean (true or false), which the picker would refuse at start`,
			},
		},
		"a tracing flag gives way to tracing.enabled, whose --tracing the upstream chart renders after the flags": {
			upstream: `
inferenceExtension:
  flags: {tracing: true}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:  `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{"flag --tracing dropped: the upstream chart overrides it with inferenceExtension.tracing.enabled"},
		},
		"a route to the Gateway the upstream chart names after the release is reported": {
			upstream: `
experimentalHttpRoute: {enabled: true, inferenceGatewayName: ""}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
httpRoute: {enabled: true}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"experimentalHttpRoute.inferenceGatewayName is empty: the upstream chart's route goes to the Gateway <release>-inference-gateway; set httpRoute.gateway.name to that name"},
		},
		"an Istio host naming the upstream picker's Service gives way to the inferpick Service's": {
			upstream: `
provider:
  name: istio
  istio: {destinationRule: {host: llama-epp.serving.svc.corp.example}}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
provider: {name: istio}
clusterDomain: corp.example
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"provider.istio.destinationRule.host llama-epp.serving.svc.corp.example names the upstream picker's Service, which the upgrade removes: the DestinationRule names the inferpick Service (clusterDomain corp.example)"},
		},
		"an Istio host of another Service is kept": {
			upstream: `
provider:
  name: istio
  istio: {destinationRule: {host: picker.mesh.internal}}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
provider: {name: istio, istio: {destinationRule: {host: picker.mesh.internal}}}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"the Service's ports": {
			upstream: `
inferenceExtension:
  extProcPort: 9102
  metricsPort: 9190
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
service: {grpcPort: 9102, metricsPort: 9190}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"flags as a list of name and value, as charts up to v1.1 give them": {
			upstream: `
inferenceExtension:
  flags:
    - name: v
      value: 3
    - name: secure-serving
      value: "false"
    - value: orphan
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {verbosity: 3}
tls: {enabled: false}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"inferenceExtension.flags[2] dropped: an entry without a name"},
		},
		"flags of another shape": {
			upstream: `
inferenceExtension:
  flags: "--v=3"
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:  `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{"inferenceExtension.flags dropped"},
		},
		"upstream plugins the picker refuses": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: p.yaml
  pluginsCustomConfig:
    p.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: token-load-scorer
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: token-load-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:  `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{"pluginsCustomConfig[p.yaml] dropped", "use active-request-scorer"},
		},
		"llm-d's load-aware and active-request scorers: the weighted scorer's load scores": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: load.yaml
  pluginsCustomConfig:
    load.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: prefix-cache-scorer
      - type: load-aware-scorer
        parameters: {threshold: 64}
      - type: active-request-scorer
        parameters: {maxBusyScore: 1}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: prefix-cache-scorer
        - pluginRef: load-aware-scorer
        - pluginRef: active-request-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer:
      prefixWeight: 1
      loadAwareWeight: 1
      loadAwareThreshold: 64
      activeRequestWeight: 1
      activeRequest: {maxBusyScore: 1}
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"upstream's latency predictor: the slo block with admission, and no sidecar": {
			upstream: `
inferenceExtension:
  latencyPredictor:
    enabled: true
    trainingServer:
      image: {hub: example.com, name: latencypredictor-training-server, tag: v1}
      port: 8000
      config: {LATENCY_RETRAINING_INTERVAL_SEC: "1"}
    predictionServers:
      count: 10
      startPort: 8001
    eppEnv:
      LATENCY_MAX_SAMPLE_SIZE: "10000"
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {config: {slo: {admission: true, wholeResponse: true}}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{
				"inferenceExtension.latencyPredictor.trainingServer, predictionServers, eppEnv dropped: the picker learns its latency predictions itself, no sidecar is needed",
				"inferenceExtension.latencyPredictor.enabled becomes picker.config.slo {admission: true, wholeResponse: true}",
				"x-slo-tpot-ms is not judged, as upstream's predicted-latency-producer does without streamingMode",
			},
			noNotes: []string{"weighted-scorer", "has no effect"},
		},
		"the latency predictor's rendered config named as a custom one reads the same": {
			upstream: strings.Replace(customConfig("latency.yaml", readSample(t, "gie-v1.5.0-latency-predictor-config.yaml")),
				"inferenceExtension:\n", "inferenceExtension:\n  latencyPredictor: {enabled: true}\n", 1),
			want: `
picker: {config: {name: cache-aware, slo: {admission: true, wholeResponse: true}}, modelServerMetrics: {path: /metrics}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"strict-affinity-filter (prefix-cache-affinity-filter) affinityThreshold 0.99 has no effect"},
			noNotes: []string{"dropped: the picker learns", "has no effect here"},
		},
		"the latency predictor beside a config without its plugins: nothing routes by latency, as upstream": {
			upstream: strings.Replace(customConfig("q.yaml", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: queue-scorer\n"),
				"inferenceExtension:\n", "inferenceExtension:\n  latencyPredictor: {enabled: true}\n", 1),
			want: `
picker: {config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"inferenceExtension.latencyPredictor.enabled has no effect here"},
		},
		"the latency predictor beside a config whose producer predicts nothing: the note names no missing producer": {
			upstream: strings.Replace(customConfig("p.yaml", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: predicted-latency-producer\n  parameters: {predictInPrepareData: false}\n- type: latency-scorer\nschedulingProfiles:\n- name: default\n  plugins:\n  - pluginRef: predicted-latency-producer\n  - pluginRef: latency-scorer\n"),
				"inferenceExtension:\n", "inferenceExtension:\n  latencyPredictor: {enabled: true}\n", 1),
			want: `
picker: {config: {name: cache-aware}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"predictInPrepareData false leaves the slo block off", "inferenceExtension.latencyPredictor.enabled has no effect here: the plugins config the values name (pluginsConfigFile) gives no slo block (set picker.config.slo"},
			noNotes: []string{"listing no predicted-latency-producer"},
		},
		"the latency predictor beside a plugins config that is not there: the note says so": {
			upstream: `
inferenceExtension:
  latencyPredictor: {enabled: true}
  pluginsConfigFile: missing.yaml
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:    `pool: {selector: {matchLabels: {app: m}}}`,
			notes:   []string{"gives no slo block: missing.yaml is not in pluginsCustomConfig (set picker.config.slo"},
			noNotes: []string{"listing no predicted-latency-producer"},
		},
		"the latency predictor beside a plugins config that is refused: the note says why": {
			upstream: strings.Replace(customConfig("bad.yaml", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: no-such-plugin\n"),
				"inferenceExtension:\n", "inferenceExtension:\n  latencyPredictor: {enabled: true}\n", 1),
			want:    `pool: {selector: {matchLabels: {app: m}}}`,
			notes:   []string{"gives no slo block: pluginsCustomConfig[bad.yaml] is refused (line 4: plugin type \"no-such-plugin\" is not supported"},
			noNotes: []string{"listing no predicted-latency-producer"},
		},
		"the latency predictor's values while it is off are dropped without a word": {
			upstream: `
inferenceExtension:
  latencyPredictor:
    enabled: false
    predictionServers: {count: 2}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:    `pool: {selector: {matchLabels: {app: m}}}`,
			noNotes: []string{"latencyPredictor"},
		},
		"llm-d's precise prefix-cache routing: cache-aware on the pods' KV-cache events": {
			upstream: customConfig("precise.yaml", readConfig(t, "llm-d-precise-prefix-plugins.yaml")),
			want: `
picker:
  config: {name: cache-aware}
  kvEvents: {port: 5556, topic: "kv@"}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"pluginsCustomConfig[precise.yaml]: tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect"},
		},
		"llm-d's KV-cache sample: the pods connect to zmqEndpoint, which becomes the listen port": {
			upstream: customConfig("kv.yaml", readSample(t, "llm-d-v0.8.0-sim-epp-kvcache-config.yaml")),
			want: `
picker:
  config: {name: cache-aware}
  kvEvents: {port: 5557, listenPort: 5557, topic: "kv@"}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{
				"pluginsCustomConfig[kv.yaml]: tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect",
				"pluginsCustomConfig[kv.yaml]: kvEventsConfig.zmqEndpoint becomes picker.kvEvents.listenPort",
			},
		},
		"the max-score picker's maxNumOfEndpoints: the endpoints the gateway is given": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: one.yaml
  pluginsCustomConfig:
    one.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: queue-scorer
      - type: max-score-picker
        parameters: {maxNumOfEndpoints: 1}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
        - pluginRef: max-score-picker
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
  fallbacks: 0
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"a max-score picker the profile leaves out: its maxNumOfEndpoints still sets the fallbacks": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: one.yaml
  pluginsCustomConfig:
    one.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      plugins:
      - type: queue-scorer
      - type: max-score-picker
        parameters: {maxNumOfEndpoints: 5}
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
  fallbacks: 4
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"llm-d's precise prefix-cache sample, on TensorRT-LLM": {
			upstream: customConfig("precise.yaml", strings.Replace(readConfig(t, "llm-d-v0.8.0-precise-prefix-cache-config.yaml"),
				"- type: core-metrics-extractor", "- type: core-metrics-extractor\n    parameters: {defaultEngine: trtllm-serve}", 1)),
			want: `
picker:
  config: {name: cache-aware}
  kvEvents: {port: 5557, topic: "kv@"}
  modelServerType: trtllm
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"pluginsCustomConfig[precise.yaml]: parameters of tokenizer (modelName) have no effect"},
		},
		"llm-d's prefill/decode sample: the decider's threshold becomes the policy's disaggregation": {
			upstream: customConfig("pd.yaml", readSample(t, "llm-d-v0.8.0-pd-epp-config.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {queueWeight: 1, prefixWeight: 2}
    disaggregation: {minUncachedTokens: 16}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"pluginsCustomConfig[pd.yaml]: featureGate prepareDataPlugins has no effect"},
			noNotes: []string{"dropped"},
		},
		"llm-d's data-parallel sample: the handler's primaryPort becomes the policy's dataParallel": {
			upstream: customConfig("dp.yaml", readSample(t, "llm-d-v0.8.0-dp-epp-config.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {prefixWeight: 2}
    dataParallel: {primaryPort: 8000}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"pluginsCustomConfig[dp.yaml]: data-parallel-profile-handler is deprecated in llm-d"},
			noNotes: []string{"dropped"},
		},
		"llm-d's E/P/D sample: the encode stage is carried in the policy's disaggregation": {
			upstream: customConfig("epd.yaml", readSample(t, "llm-d-v0.8.0-sim-epd-epp-config.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {queueWeight: 1}
    disaggregation: {minUncachedTokens: 16, encode: multimodal}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"pluginsCustomConfig[epd.yaml]: featureGate prepareDataPlugins has no effect"},
			noNotes: []string{"dropped"},
		},
		"upstream's request-attribute-reporter sample: its attribute is carried to picker.attributes": {
			upstream: customConfig("cost.yaml", readSample(t, "gie-v1.5.0-request-attribute-reporter-config.yaml")),
			want: `
picker:
  config: {name: random}
  attributes:
  - namespace: envoy.lb
    name: x-gateway-inference-request-cost
    expression: "usage.completion_tokens\n"
    condition: has(usage.completion_tokens)
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"pluginsCustomConfig[cost.yaml]: request-attribute-reporter attributes envoy.lb/x-gateway-inference-request-cost become picker.attributes"},
			noNotes: []string{"dropped"},
		},
		"two request-attribute-reporters, in the file's order": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: cost.yaml
  pluginsCustomConfig:
    cost.yaml: |
      kind: EndpointPickerConfig
      plugins:
      - {name: b, type: request-attribute-reporter, parameters: {attributes: [{key: {namespace: billing, name: out}, expression: usage.completion_tokens}]}}
      - {name: a, type: request-attribute-reporter, parameters: {attributes: [{key: {name: in}, expression: usage.prompt_tokens * 2.0, condition: usage.prompt_tokens > 0}]}}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: random}
  attributes:
  - {namespace: billing, name: out, expression: usage.completion_tokens}
  - {namespace: envoy.lb, name: in, expression: usage.prompt_tokens * 2.0, condition: usage.prompt_tokens > 0}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"attributes billing/out, envoy.lb/in become picker.attributes"},
		},
		"llm-d's context-length filtering sample: the policy's contextLength, filtering, and its weight": {
			upstream: customConfig("ctx.yaml", readSample(t, "llm-d-v0.8.0-context-length-filter.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {contextLengthWeight: 1, noDefaultWeights: true}
    contextLength: {label: llm-d.ai/context-length-range, filter: true}
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"dropped"},
		},
		"llm-d's prefill/decode sample with by-label filters: each stage's filter, the prefill pod among every pod": {
			upstream: customConfig("pd.yaml", readSample(t, "llm-d-v0.8.0-pd-by-label.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {prefixWeight: 1}
    labelFilters: [{label: role, values: [decode]}]
    disaggregation:
      minUncachedTokens: 8
      prefillLabelFilters: [{label: role, values: [prefill]}]
      prefillPods: all
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"dropped"},
		},
		"E/PD with a label filter in the encode profile: the encode stage's filter": {
			upstream: customConfig("epd.yaml", "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"+
				"plugins:\n- type: encode-filter\n- type: decode-filter\n- type: queue-scorer\n"+
				"- type: by-label\n  name: near\n  parameters: {label: zone, validValues: [a]}\n"+
				"- type: always-disagg-multimodal-decider\n- type: disagg-profile-handler\n  parameters: {deciders: {encode: always-disagg-multimodal-decider}}\n"+
				"schedulingProfiles:\n- name: encode\n  plugins: [{pluginRef: encode-filter}, {pluginRef: near}]\n"+
				"- name: decode\n  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]\n"),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {queueWeight: 1}
    disaggregation:
      minUncachedTokens: 0
      prefillPods: none
      encode: multimodal
      encodeLabelFilters: [{label: zone, values: [a]}]
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"dropped", "no effect"},
		},
		"llm-d's by-label-selector sample: the policy's label filters": {
			upstream: customConfig("sel.yaml", readSample(t, "llm-d-v0.8.0-by-label-selector.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {queueWeight: 2, kvCacheWeight: 2, prefixWeight: 3}
    labelFilters:
    - selector:
        matchLabels: {inference-role: decode, hardware-type: H100}
        matchExpressions: [{key: topology.kubernetes.io/zone, operator: NotIn, values: [zone-c]}]
    - {label: example.com/drain, values: ["false"], allowsNoLabel: true}
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"dropped"},
		},
		"llm-d v0.3.0's prefill/decode sample: every request prefilled apart, kept though its block is all zero": {
			upstream: customConfig("pd.yaml", readSample(t, "llm-d-v0.3.0-pd-epp-config.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {prefixWeight: 2}
    disaggregation: {minUncachedTokens: 0}
pool: {selector: {matchLabels: {app: m}}}
`,
			noNotes: []string{"dropped"},
		},
		"llm-d's prefill/decode sample with data parallelism: pd-profile-handler's primaryPort becomes the policy's dataParallel": {
			upstream: customConfig("pd.yaml", readSample(t, "llm-d-v0.6.0-sim-pd-epp-config-dp.yaml")),
			want: `
picker:
  config:
    name: weighted-scorer
    weightedScorer: {queueWeight: 1, prefixWeight: 2}
    disaggregation: {minUncachedTokens: 16}
    dataParallel: {primaryPort: 8000}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes:   []string{"pluginsCustomConfig[pd.yaml]: pd-profile-handler primaryPort is deprecated in llm-d"},
			noNotes: []string{"dropped"},
		},
		"an objective without a priority has priority 0, as upstream gives it": {
			upstream: `
inferenceObjectives:
- {name: chat, priority: 5}
- {name: plain}
- {name: batch, priority: -1}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker: {extraArgs: ["--objective-priorities=chat=5,plain=0,batch=-1"]}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"inferenceObjectives become --objective-priorities"},
		},
		"upstream's flow-control environment switch turns the queue on": {
			upstream: `
inferenceExtension:
  env:
  - {name: ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER, value: "true"}
  - {name: A, value: "1"}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env: [{name: A, value: "1"}]
picker: {flowControl: {enabled: true, maxRequests: 2147483647, maxBandRequests: 2147483647, maxBytes: 1000000000, maxWait: 2562047h0m0s}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER becomes picker.flowControl.enabled, with upstream's bounds"},
		},
		"upstream's flow-control feature gate and section are carried": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: fc.yaml
  pluginsCustomConfig:
    fc.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      featureGates: [flowControl]
      flowControl:
        maxBytes: 256Mi
        defaultRequestTTL: 20s
        defaultPriorityBand: {maxRequests: 100}
      plugins:
      - type: queue-scorer
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
  flowControl: {enabled: true, maxRequests: 2147483647, maxBandRequests: 100, maxBytes: 268435456, maxWait: 20s}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"pluginsCustomConfig[fc.yaml]: featureGate flowControl becomes picker.flowControl.enabled"},
		},
		"upstream's deadline ordering is carried": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: fc.yaml
  pluginsCustomConfig:
    fc.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      featureGates: [flowControl]
      flowControl:
        defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy}
      plugins:
      - type: queue-scorer
      schedulingProfiles:
      - name: default
        plugins:
        - pluginRef: queue-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
  flowControl: {enabled: true, maxRequests: 2147483647, maxBandRequests: 2147483647, maxBytes: 1000000000, maxWait: 2562047h0m0s, ordering: slo-deadline}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"pluginsCustomConfig[fc.yaml]: featureGate flowControl becomes picker.flowControl.enabled",
				"pluginsCustomConfig[fc.yaml]: flowControl.defaultPriorityBand names no fairnessPolicyRef, so upstream's is global-strict-fairness-policy, which has no effect"},
		},
		"upstream's flow-control section with the environment switch": {
			upstream: `
inferenceExtension:
  env: [{name: ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER, value: "true"}]
  pluginsConfigFile: fc.yaml
  pluginsCustomConfig:
    fc.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      flowControl: {maxRequests: 500}
      plugins:
      - type: queue-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env: []
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
  flowControl: {enabled: true, maxRequests: 500, maxBandRequests: 2147483647, maxBytes: 1000000000, maxWait: 2562047h0m0s}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER becomes picker.flowControl.enabled"},
		},
		"upstream's flow-control section without the gate: the queue stays off": {
			upstream: `
inferenceExtension:
  pluginsConfigFile: fc.yaml
  pluginsCustomConfig:
    fc.yaml: |
      apiVersion: inference.networking.x-k8s.io/v1alpha1
      kind: EndpointPickerConfig
      flowControl: {maxRequests: 500}
      plugins:
      - type: queue-scorer
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
picker:
  config: {name: weighted-scorer, weightedScorer: {queueWeight: 1}}
pool: {selector: {matchLabels: {app: m}}}
`,
			notes: []string{"pluginsCustomConfig[fc.yaml]: flowControl has no effect without featureGate flowControl"},
		},
		"upstream's flow-control environment switch, off and as a map": {
			upstream: `
inferenceExtension:
  env: {ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER: false}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want: `
env: []
pool: {selector: {matchLabels: {app: m}}}
`,
		},
		"unknown keys are reported": {
			upstream: `
inferenceExtension:
  somethingNew: {a: 1}
inferencePool:
  modelServers: {matchLabels: {app: m}}
`,
			want:  `pool: {selector: {matchLabels: {app: m}}}`,
			notes: []string{"inferenceExtension.somethingNew.a dropped"},
		},
		"no selector": {
			upstream: `{}`,
			want:     `{}`,
			notes:    []string{"set pool.selector.matchLabels"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			out, notes, err := Convert([]byte(tc.upstream))
			if err != nil {
				t.Fatal(err)
			}
			var got, want map[string]any
			if err := yaml.Unmarshal(out, &got); err != nil {
				t.Fatalf("output is not YAML: %v\n%s", err, out)
			}
			if err := yaml.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if want == nil {
				want = map[string]any{}
			}
			if _, ok := want["metrics"]; !ok {
				want["metrics"] = map[string]any{"serviceMonitor": map[string]any{"interval": "10s"}}
			}
			withJSONLogs(want)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("values (-want +got):\n%s", diff)
			}
			all := strings.Join(notes, "\n")
			for _, n := range tc.notes {
				if !strings.Contains(all, n) {
					t.Errorf("notes lack %q:\n%s", n, all)
				}
			}
			for _, n := range tc.noNotes {
				if strings.Contains(all, n) {
					t.Errorf("notes say %q:\n%s", n, all)
				}
			}
			for _, n := range notes {
				if !strings.Contains(string(out), "# - "+n+"\n") {
					t.Errorf("note %q is not a comment of the output", n)
				}
			}
		})
	}
}

// withJSONLogs puts --zap-encoder=json first among the picker's extra
// arguments of want, unless they give an encoder.
func withJSONLogs(want map[string]any) {
	picker, _ := want["picker"].(map[string]any)
	if picker == nil {
		picker = map[string]any{}
		want["picker"] = picker
	}
	args, _ := picker["extraArgs"].([]any)
	for _, a := range args {
		if strings.HasPrefix(fmt.Sprint(a), "--zap-encoder=") {
			return
		}
	}
	picker["extraArgs"] = append([]any{"--zap-encoder=json"}, args...)
}

// readSample reads one of llm-d's sample configurations the policy's
// tests keep.
func readSample(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "picker", "policy", "fileconfig", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// readConfig reads an EndpointPickerConfig the picker's tests keep.
func readConfig(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "cmd", "inferpick", "app", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// customConfig is upstream values whose picker reads doc, a config file
// given as pluginsCustomConfig[name], for the pods labelled app: m.
func customConfig(name, doc string) string {
	return "inferenceExtension:\n  pluginsConfigFile: " + name + "\n  pluginsCustomConfig:\n    " + name + ": |\n" +
		indent(doc, "      ") + "\ninferencePool:\n  modelServers: {matchLabels: {app: m}}\n"
}

// indent puts prefix before each line of s.
func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func TestConvertRejectsNonYAML(t *testing.T) {
	if _, _, err := Convert([]byte("inferenceExtension: [")); err == nil {
		t.Error("converted a broken file")
	}
}

// FuzzConvert checks that any input either fails to parse or converts to
// YAML that reads back as a mapping.
func FuzzConvert(f *testing.F) {
	f.Add([]byte("inferenceExtension: {replicas: 3, flags: {v: 2}}\ninferencePool: {targetPorts: [{number: 8000}]}"))
	f.Add([]byte("provider: {name: gke}\nexperimentalHttpRoute: {enabled: true}"))
	f.Add([]byte("inferenceObjectives: [{name: a, priority: 1}]"))
	f.Add([]byte("inferenceExtension:\n  pluginsCustomConfig:\n    default-plugins.yaml: |\n      kind: EndpointPickerConfig\n      featureGates: [flowControl]\n      flowControl: {maxRequests: 5}\n"))
	f.Add([]byte("inferenceExtension:\n  pluginsCustomConfig:\n    default-plugins.yaml: |\n      kind: EndpointPickerConfig\n      plugins:\n      - {type: request-attribute-reporter, parameters: {attributes: [{key: {name: c}, expression: usage.total_tokens, condition: \"true\"}]}}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, _, err := Convert(data)
		if err != nil {
			return
		}
		var m map[string]any
		if err := yaml.Unmarshal(out, &m); err != nil {
			t.Fatalf("output is not YAML: %v\n%s", err, out)
		}
	})
}
