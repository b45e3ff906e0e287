package app

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/scrape"
)

const upstreamConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: metrics-data-source
  parameters: {path: /custom}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: queue-scorer
    weight: 4
`

// TestUpstreamFlags parses each upstream endpoint picker and llm-d flag:
// implemented ones change the options, inert ones warn or not depending on
// whether their value asks for what inferpick does anyway.
func TestUpstreamFlags(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cfgFile, []byte(upstreamConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	precise, err := os.ReadFile(filepath.Join("testdata", "llm-d-precise-prefix-plugins.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	preciseConfig := string(precise)
	static := []string{"--static-endpoints", "127.0.0.1:1"}
	const header = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	const profile = "schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n  - pluginRef: max-score-picker\n"
	cases := map[string]struct {
		args    []string
		got     func(o *Options) any
		want    any
		warned  []string // flags warned about, in flag name order
		wantErr string
		bare    bool // without --static-endpoints
	}{
		"tls min version": {
			args: []string{"--tls-min-version", "VersionTLS13"},
			got:  func(o *Options) any { return o.tlsMinVersion }, want: uint16(tls.VersionTLS13),
		},
		"tls min version defaults to 1.2": {
			got: func(o *Options) any { return o.tlsMinVersion }, want: uint16(tls.VersionTLS12),
		},
		"unknown tls version": {args: []string{"--tls-min-version", "TLS1.3"}, wantErr: "--tls-min-version"},
		"cipher suites": {
			args: []string{"--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"},
			got:  func(o *Options) any { return o.tlsCipherSuites },
			want: []uint16{tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384},
		},
		"unknown cipher suite": {args: []string{"--tls-cipher-suites", "TLS_NOPE"}, wantErr: `"TLS_NOPE"`},
		"grpc sizes with a B suffix": {
			args: []string{"--grpc-max-recv-msg-size", "10MiB", "--grpc-max-send-msg-size", "25MB"},
			got:  func(o *Options) any { return []int{o.GRPCMaxRecvMsgSize.n, o.GRPCMaxSendMsgSize.n} },
			want: []int{10 << 20, 25_000_000},
		},
		"grpc size as a quantity": {
			args: []string{"--grpc-max-recv-msg-size", "8Mi"},
			got:  func(o *Options) any { return len(extProcOptions(o)) - len(extProcOptions(NewOptions())) }, want: 1,
		},
		"bad grpc size":  {args: []string{"--grpc-max-recv-msg-size", "lots"}, wantErr: "grpc-max-recv-msg-size"},
		"huge grpc size": {args: []string{"--grpc-max-send-msg-size", "3Gi"}, wantErr: "grpc-max-send-msg-size"},
		"pprof":          {args: []string{"--enable-pprof"}, got: func(o *Options) any { return len(pprofHandlers(o)) }, want: 5},
		"pprof off":      {got: func(o *Options) any { return len(pprofHandlers(o)) }, want: 0},
		"config text": {
			args: []string{"--config-text", upstreamConfig},
			got: func(o *Options) any {
				return []any{o.Policy.Name, o.Policy.WeightedScorer.QueueWeight, o.ModelServerMetricsPath}
			},
			want: []any{policy.WeightedScorer, 4.0, "/custom"},
		},
		"config file, the metrics path flag wins": {
			args: []string{"--config-file", cfgFile, "--model-server-metrics-path", "/m"},
			got:  func(o *Options) any { return []any{o.Policy.Name, o.ModelServerMetricsPath} },
			want: []any{policy.WeightedScorer, "/m"},
		},
		"llm-d's precise prefix-cache scorer subscribes to the pods' KV-cache events": {
			args:   []string{"--config-text", preciseConfig},
			got:    func(o *Options) any { return []any{o.Policy.Name, o.KVEventsPort, o.KVEventsTopic} },
			want:   []any{policy.CacheAware, 5556, "kv@"},
			warned: []string{"--config-text"}, // its tokenProcessorConfig has no effect
		},
		"the KV-events port flag wins over the scorer's": {
			args:   []string{"--config-text", preciseConfig, "--kv-events-port", "5600", "--kv-events-topic", "kv"},
			got:    func(o *Options) any { return []any{o.KVEventsPort, o.KVEventsTopic} },
			want:   []any{5600, "kv"},
			warned: []string{"--config-text"},
		},
		"llm-d's zmqEndpoint: the pods connect to the picker, which listens": {
			args: []string{"--config-text", header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {zmqEndpoint: \"tcp://*:5557\", discoverPods: false}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: precise-prefix-cache-scorer\n"},
			got:  func(o *Options) any { return []any{o.Policy.Name, o.KVEventsPort, o.KVEventsListen, o.KVEventsTopic} },
			want: []any{policy.CacheAware, 0, ":5557", "kv@"},
		},
		"the KV-events listen flag wins over zmqEndpoint": {
			args: []string{"--config-text", header + "plugins:\n- type: precise-prefix-cache-scorer\n  parameters:\n    kvEventsConfig: {zmqEndpoint: \"tcp://*:5557\"}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: precise-prefix-cache-scorer\n", "--kv-events-listen", "127.0.0.1:6000"},
			got:  func(o *Options) any { return []any{o.KVEventsPort, o.KVEventsListen} },
			want: []any{5557, "127.0.0.1:6000"},
		},
		"the max-score picker's maxNumOfEndpoints sets the fallbacks": {
			args: []string{"--config-text", header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 1}\n" + profile},
			got:  func(o *Options) any { return o.Fallbacks }, want: 0,
		},
		"--fallbacks wins over maxNumOfEndpoints, and says so": {
			args: []string{"--config-text", header + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n  parameters: {maxNumOfEndpoints: 1}\n" + profile, "--fallbacks", "3"},
			got:  func(o *Options) any { return o.Fallbacks }, want: 3,
			warned: []string{"--config-text"},
		},
		"llm-d's precise prefix-cache sample": {
			args:   []string{"--config-text", readTestdata(t, "llm-d-v0.8.0-precise-prefix-cache-config.yaml")},
			got:    func(o *Options) any { return []any{o.Policy.Name, o.KVEventsPort, o.KVEventsTopic} },
			want:   []any{policy.CacheAware, 5557, "kv@"},
			warned: []string{"--config-text", "--config-text", "--config-text"}, // tokenizer, tokenProcessorConfig, weights
		},
		"TensorRT-LLM's metric names from core-metrics-extractor": {
			args: []string{"--config-text", header + "plugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {defaultEngine: trtllm-serve}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n"},
			got:  func(o *Options) any { return o.ModelServer.names },
			want: mustPreset(t, scrape.TRTLLM),
		},
		"--model-server-type wins over core-metrics-extractor": {
			args: []string{"--model-server-type", "vllm", "--config-text", header + "plugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {defaultEngine: trtllm-serve}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n"},
			got:  func(o *Options) any { return o.ModelServer.names },
			want: mustPreset(t, scrape.VLLM),
		},
		"featureGate enableLegacyMetrics: the names of the flags, core-metrics-extractor's ignored as upstream ignores it": {
			args: []string{"--config-text", header + "featureGates: [enableLegacyMetrics]\nplugins:\n- type: queue-scorer\n- type: core-metrics-extractor\n  parameters: {defaultEngine: trtllm-serve}\n" +
				"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: queue-scorer\n"},
			got:    func(o *Options) any { return o.ModelServer.names },
			want:   mustPreset(t, scrape.Auto),
			warned: []string{"--config-text"},
		},
		"config file and text":   {args: []string{"--config-file", cfgFile, "--config-text", "policy: {}"}, wantErr: "exclude"},
		"config text error line": {args: []string{"--config-text", "policy:\n  name: random\n  nmae: x\n"}, wantErr: "line 3"},
		"endpoint selector": {
			args: []string{"--endpoint-selector", "app=vllm,env in (prod)", "--endpoint-target-ports", "8000,8001,8000"},
			got: func(o *Options) any {
				return []any{o.selector.String(), []int(o.EndpointTargetPorts)}
			},
			want:   []any{"app=vllm,env in (prod)", []int{8000, 8001}},
			warned: []string{"--endpoint-selector"},
		},
		"endpoint selector needs ports": {args: []string{"--endpoint-selector", "app=vllm"}, wantErr: "1 to 8 --endpoint-target-ports"},
		"too many ports":                {args: []string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "1,2,3,4,5,6,7,8,9"}, wantErr: "got 9"},
		"repeated ports flag": {
			args: []string{"--endpoint-selector", "a=b", "--endpoint-target-ports", "8000", "--endpoint-target-ports", "8001,8000"},
			got:  func(o *Options) any { return []int(o.EndpointTargetPorts) }, want: []int{8000, 8001},
			warned: []string{"--endpoint-selector"},
		},
		"bad port":          {args: []string{"--endpoint-target-ports", "0"}, wantErr: `port "0" is not from 1 to 65535`},
		"bad selector":      {args: []string{"--endpoint-selector", "app==="}, wantErr: "--endpoint-selector"},
		"selector and pool": {args: []string{"--endpoint-selector", "a=b", "--endpoint-target-ports", "1", "--pool-name", "p"}, wantErr: "exclude"},
		"selector without static endpoints": {
			args: []string{"--endpoint-selector", "a=b", "--endpoint-target-ports", "1"}, bare: true,
			got: func(o *Options) any { return o.leaderElectionID() }, want: "inferpick-selector-0ab0bc73",
		},
		"pool name with static endpoints":      {args: []string{"--pool-name", "p"}, warned: []string{"--pool-name"}},
		"tracing off, as the charts render it": {args: []string{"--tracing=false"}, got: func(o *Options) any { return o.Tracing }, want: false},
		"health checking without a value":      {args: []string{"--health-checking"}, warned: []string{"--health-checking"}},
		"cert reload on: what inferpick does":  {args: []string{"--enable-cert-reload"}},
		"cert reload off":                      {args: []string{"--enable-cert-reload=false"}, warned: []string{"--enable-cert-reload"}},
		"prometheus refresh interval":          {args: []string{"--refresh-prometheus-metrics-interval", "5s"}, warned: []string{"--refresh-prometheus-metrics-interval"}},
		"bad duration":                         {args: []string{"--refresh-prometheus-metrics-interval", "soon"}, wantErr: "soon"},
		"bad bool":                             {args: []string{"--health-checking=maybe"}, wantErr: "maybe"},
		"http scheme":                          {args: []string{"--model-server-metrics-scheme", "http"}},
		"https scheme":                         {args: []string{"--model-server-metrics-scheme", "https"}, warned: []string{"--model-server-metrics-scheme"}},
		"insecure skip verify":                 {args: []string{"--model-server-metrics-https-insecure-skip-verify=true"}, warned: []string{"--model-server-metrics-https-insecure-skip-verify"}},
		"triton metric flags are real, not warned about": {
			args: []string{"--total-queued-requests-metric", "nv_trt_llm_request_metrics{request_type=waiting}", "--lora-info-metric", ""},
			got:  func(o *Options) any { return []any{o.ModelServer.names.Waiting, o.ModelServer.names.LoRA} },
			want: []any{[]scrape.Series{{Name: "nv_trt_llm_request_metrics", Labels: []scrape.LabelMatch{{Name: "request_type", Value: "waiting"}}}}, []scrape.Series(nil)},
		},
		"sglang cache info flag, quoted as charts render it": {
			args: []string{`--cache-info-metric="sglang:cache_config_info"`},
			got:  func(o *Options) any { return o.ModelServer.names.CacheInfo },
			want: []scrape.CacheInfo{{Series: scrape.Series{Name: "sglang:cache_config_info"}, BlockSizeLabel: "page_size", NumBlocksLabel: "num_pages"}},
		},
		"trtllm-serve's metrics path, quoted as the upstream chart renders it": {
			args: []string{`--model-server-metrics-path="/prometheus/metrics"`},
			got:  func(o *Options) any { return o.ModelServerMetricsPath }, want: "/prometheus/metrics",
		},
		"bad metric spec": {args: []string{"--total-running-requests-metric", "m{a!=b}"}, wantErr: "--total-running-requests-metric"},
		"the upstream chart's flags map: a boolean, then its value, then more flags": {
			args: []string{"--disable-endpoint-subset-filter", "true", "--v", "3", "--tracing=false", "--metrics-endpoint-auth=false"},
			got: func(o *Options) any {
				return []any{o.DisableSubsetFilter, o.logging.verbose, o.Tracing, o.MetricsEndpointAuth}
			},
			want: []any{true, 3, false, false},
		},
		"the upstream chart's flags map: false after a boolean turns it off, and says the upstream picker reads it as true": {
			args:   []string{"--metrics-endpoint-auth", "false", "--secure-serving", "FALSE", "--enable-pprof", "0", "--grpc-port", "9100"},
			got:    func(o *Options) any { return []any{o.MetricsEndpointAuth, o.SecureServing, o.EnablePprof, o.GRPCPort} },
			want:   []any{false, false, false, 9100},
			warned: []string{"--metrics-endpoint-auth", "--secure-serving", "--enable-pprof"},
		},
		"a boolean's value the flag package reads as a value": {
			args:   []string{"--enable-cert-reload", "False", "--health-checking", "T"},
			warned: []string{"--enable-cert-reload", "--health-checking", "--enable-cert-reload"},
		},
		"false written with its boolean is read as upstream reads it, without a warning": {
			args: []string{"--secure-serving=false"},
			got:  func(o *Options) any { return o.SecureServing }, want: false,
		},
		"a word after a boolean is refused, not the rest dropped": {
			args: []string{"--disable-endpoint-subset-filter", "yes", "--grpc-port", "9100"}, wantErr: `"yes"`,
		},
		"an argument that is no flag's value": {args: []string{"--grpc-port", "9100", "9101"}, wantErr: `"9101"`},
		"arguments after a double dash":       {args: []string{"--", "--grpc-port", "9100"}, wantErr: `"--grpc-port"`},
		"-v with its level attached, as the upstream picker's shorthand takes it": {
			args: []string{"-v3"},
			got:  func(o *Options) any { return o.logging.verbose }, want: 3,
		},
		"a value that looks like a flag is a value": {
			args: []string{"--pool-group", "--disable-endpoint-subset-filter", "--v", "2"},
			got:  func(o *Options) any { return []any{o.PoolGroup, o.DisableSubsetFilter, o.logging.verbose} },
			want: []any{"--disable-endpoint-subset-filter", false, 2},
		},
		"subset filter off":                  {args: []string{"--disable-endpoint-subset-filter"}, got: func(o *Options) any { return o.DisableSubsetFilter }, want: true},
		"subset filter kept":                 {args: []string{"--disable-endpoint-subset-filter=false"}, got: func(o *Options) any { return o.DisableSubsetFilter }, want: false},
		"endpoint scores":                    {args: []string{"--emit-endpoint-scores"}, warned: []string{"--emit-endpoint-scores"}},
		"stream metrics on":                  {args: []string{"--enable-grpc-stream-metrics"}},
		"stream metrics off":                 {args: []string{"--enable-grpc-stream-metrics=false"}, warned: []string{"--enable-grpc-stream-metrics"}},
		"experimental":                       {args: []string{"--allow-experimental-plugins"}, warned: []string{"--allow-experimental-plugins"}},
		"metrics staler than the interval":   {args: []string{"--refresh-metrics-interval", "5s"}, warned: []string{"--refresh-metrics-interval"}},
		"a staleness of 0 keeps the default": {args: []string{"--metrics-staleness-threshold", "0"}},
		"metrics fresh through the interval": {args: []string{"--refresh-metrics-interval", "5s", "--metrics-staleness-threshold", "6s"}},
		"metrics staler than the interval, by the configuration": {
			args:   []string{"--refresh-metrics-interval", "1s", "--config-text", "policy:\n  metricsStaleness: 500ms\n"},
			warned: []string{"--refresh-metrics-interval"},
		},
		"flow-control bounds without the queue": {
			args:   []string{"--flow-control-max-wait", "5s", "--flow-control-reserved-slots", "2"},
			warned: []string{"--flow-control-max-wait", "--flow-control-reserved-slots"},
		},
		"flow-control bounds with the queue":   {args: []string{"--flow-control", "--flow-control-max-wait", "5s", "--flow-control-reserved-slots", "2"}},
		"metrics over https outside a cluster": {args: []string{"--metrics-secure-serving"}, warned: []string{"--metrics-secure-serving"}},
		"metrics over http outside a cluster":  {args: []string{"--metrics-secure-serving=false"}},
		"metrics mTLS": {
			args:   []string{"--metrics-client-ca-file", "/ca.pem", "--metrics-cert-dir", "/certs"},
			warned: []string{"--metrics-cert-dir", "--metrics-client-ca-file"},
		},
		"lora scorer in the config is taken without warning": {
			args: []string{"--config-text", "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: lora-affinity-scorer\nschedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: lora-affinity-scorer\n"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			args := tc.args
			if !tc.bare {
				args = append(append([]string{}, static...), tc.args...)
			}
			o, err := parse(t, args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.got != nil {
				if diff := cmp.Diff(tc.want, tc.got(o)); diff != "" {
					t.Errorf("options (-want +got):\n%s", diff)
				}
			}
			var warned []string
			for _, w := range o.Warnings {
				warned = append(warned, w.Flag)
			}
			if diff := cmp.Diff(tc.warned, warned); diff != "" {
				t.Errorf("flags warned about (-want +got):\n%s", diff)
			}
		})
	}
}

// readTestdata returns a file of testdata as a string.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// mustPreset returns the metric names of a --model-server-type.
func mustPreset(t *testing.T, kind string) scrape.Names {
	t.Helper()
	names, err := scrape.Preset(kind)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// TestLogging checks the zap flags and -v: which lines a logger built from
// the flags writes, and in which encoding.
func TestLogging(t *testing.T) {
	cases := map[string]struct {
		args []string
		want []string // messages written, of "v0", "v1", "v2", "v3", "error"
		json bool
	}{
		"defaults: console, V(0)":            {want: []string{"v0", "error"}},
		"-v 2 logs V(2)":                     {args: []string{"-v", "2"}, want: []string{"v0", "v1", "v2", "error"}},
		"json":                               {args: []string{"--zap-encoder", "json"}, want: []string{"v0", "error"}, json: true},
		"zap log level wins over -v":         {args: []string{"-v", "3", "--zap-log-level", "error"}, want: []string{"error"}},
		"numeric zap log level":              {args: []string{"--zap-log-level", "3", "--zap-encoder=json"}, want: []string{"v0", "v1", "v2", "v3", "error"}, json: true},
		"devel follows -v, console":          {args: []string{"--zap-devel", "-v", "1"}, want: []string{"v0", "v1", "error"}},
		"stacktrace level and time encoding": {args: []string{"--zap-stacktrace-level", "panic", "--zap-time-encoding", "epoch"}, want: []string{"v0", "error"}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--static-endpoints", "127.0.0.1:1"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			o.logging.zap.DestWriter = &buf
			log := o.logging.logger()
			for v := range 4 {
				log.V(v).Info("v" + string(rune('0'+v)))
			}
			log.Error(nil, "error")

			var got []string
			for line := range strings.SplitSeq(strings.TrimSpace(buf.String()), "\n") {
				var entry struct {
					Msg string `json:"msg"`
				}
				isJSON := json.Unmarshal([]byte(line), &entry) == nil
				if isJSON != tc.json {
					t.Errorf("line %q: JSON %v, want %v", line, isJSON, tc.json)
				}
				for _, m := range []string{"v0", "v1", "v2", "v3", "error"} {
					if entry.Msg == m || (!isJSON && strings.Contains(line, "\t"+m)) {
						got = append(got, m)
					}
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("messages written (-want +got):\n%s\n%s", diff, buf.String())
			}
		})
	}
}

// upstreamFlagNames are the flags of the upstream endpoint picker v1.5.0
// (cmd/epp) and of llm-d's router.
var upstreamFlagNames = []string{
	"grpc-port", "ha-enable-leader-election", "pool-group", "pool-namespace", "pool-name",
	"endpoint-selector", "endpoint-target-ports", "disable-endpoint-subset-filter",
	"model-server-metrics-scheme", "model-server-metrics-path", "model-server-metrics-port",
	"model-server-metrics-https-insecure-skip-verify", "refresh-metrics-interval",
	"refresh-prometheus-metrics-interval", "metrics-staleness-threshold",
	"total-queued-requests-metric", "total-running-requests-metric", "kv-cache-usage-percentage-metric",
	"lora-info-metric", "cache-info-metric", "v", "zap-devel", "zap-encoder", "zap-log-level",
	"zap-stacktrace-level", "zap-time-encoding", "tracing", "health-checking", "metrics-port",
	"grpc-health-port", "enable-pprof", "cert-path", "enable-cert-reload", "secure-serving",
	"metrics-endpoint-auth", "config-file", "config-text", "kubeconfig",
	// llm-d's router.
	"drain-timeout", "grpc-max-recv-msg-size", "grpc-max-send-msg-size", "emit-endpoint-scores",
	"enable-grpc-stream-metrics", "tls-min-version", "tls-cipher-suites", "metrics-client-ca-file",
	"metrics-cert-dir", "allow-experimental-plugins",
}

func TestEveryUpstreamFlagIsAccepted(t *testing.T) {
	fs := flag.NewFlagSet("inferpick", flag.ContinueOnError)
	NewOptions().AddFlags(fs)
	for _, name := range upstreamFlagNames {
		if fs.Lookup(name) == nil {
			t.Errorf("--%s is not accepted", name)
		}
	}
}
