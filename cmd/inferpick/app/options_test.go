package app

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/policy/fileconfig"
)

func parse(t *testing.T, args ...string) (*Options, error) {
	t.Helper()
	return Parse(flag.NewFlagSet("inferpick", flag.ContinueOnError), args)
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(cfg, []byte("policy:\n  name: least-load\n  queueThreshold: 9\n  index:\n    maxBlocks: 5000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("policy:\n  nmae: typo\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		args    []string
		env     string
		wantErr string
		check   func(t *testing.T, o *Options)
	}{
		"pool with namespace from the environment": {
			args: []string{"--pool-name", "vllm"}, env: "team-a",
			check: func(t *testing.T, o *Options) {
				if o.PoolNamespace != "team-a" {
					t.Errorf("namespace %q, want team-a", o.PoolNamespace)
				}
			},
		},
		"static endpoints": {
			args: []string{"--static-endpoints", "127.0.0.1:8000, 127.0.0.2:8000"},
			check: func(t *testing.T, o *Options) {
				got := []string{o.static[0].String(), o.static[1].String()}
				if diff := cmp.Diff([]string{"127.0.0.1:8000", "127.0.0.2:8000"}, got); diff != "" {
					t.Errorf("endpoints (-want +got):\n%s", diff)
				}
			},
		},
		"config file, flag overrides the name": {
			args: []string{"--static-endpoints", "127.0.0.1:1", "--config-file", cfg, "--policy", "random"},
			check: func(t *testing.T, o *Options) {
				if o.Policy.Name != "random" || o.Policy.QueueThreshold != 9 {
					t.Errorf("policy %+v, want random with queueThreshold 9", o.Policy)
				}
			},
		},
		"config file sets the index cap": {
			args: []string{"--static-endpoints", "127.0.0.1:1", "--config-file", cfg},
			check: func(t *testing.T, o *Options) {
				if o.Policy.Index.MaxBlocks != 5000 {
					t.Errorf("index.maxBlocks %d, want 5000 from the file", o.Policy.Index.MaxBlocks)
				}
			},
		},
		"flag overrides the index cap": {
			args: []string{"--static-endpoints", "127.0.0.1:1", "--config-file", cfg, "--prefix-index-max-blocks", "7000"},
			check: func(t *testing.T, o *Options) {
				if o.Policy.Index.MaxBlocks != 7000 {
					t.Errorf("index.maxBlocks %d, want 7000 from the flag", o.Policy.Index.MaxBlocks)
				}
			},
		},
		"negative index cap":         {args: []string{"--pool-name", "p", "--prefix-index-max-blocks", "-1"}, wantErr: "--prefix-index-max-blocks"},
		"unknown config field":       {args: []string{"--pool-name", "p", "--config-file", bad}, wantErr: "nmae"},
		"neither pool nor endpoints": {args: nil, wantErr: "one of --pool-name, --endpoint-selector or --static-endpoints"},
		"bad endpoint":               {args: []string{"--static-endpoints", "localhost"}, wantErr: "not ip:port"},
		"endpoint of port 0":         {args: []string{"--static-endpoints", "10.0.0.2:8000,10.0.0.1:0"}, wantErr: `"10.0.0.1:0" is not ip:port`},
		"renewal no longer than retry": {args: []string{"--pool-name", "p", "--leader-election-renew-deadline", "2s", "--leader-election-retry-period", "2s"},
			wantErr: "--leader-election-renew-deadline 2s over 1.2 × --leader-election-retry-period 2s"},
		"leader election statically":              {args: []string{"--static-endpoints", "127.0.0.1:1", "--ha-enable-leader-election"}, wantErr: "needs a cluster"},
		"unknown ha mode":                         {args: []string{"--pool-name", "p", "--ha-mode", "active"}, wantErr: "--ha-mode"},
		"negative fallbacks":                      {args: []string{"--pool-name", "p", "--fallbacks", "-1"}, wantErr: "--fallbacks"},
		"negative drain timeout":                  {args: []string{"--pool-name", "p", "--drain-timeout", "-10s"}, wantErr: "--drain-timeout -10s is negative"},
		"port out of range":                       {args: []string{"--pool-name", "p", "--grpc-port", "70000"}, wantErr: "--grpc-port 70000 is not a port from 1 to 65535 (0: one the system picks)"},
		"model server metrics port out of range":  {args: []string{"--pool-name", "p", "--model-server-metrics-port", "70000"}, wantErr: "--model-server-metrics-port 70000 is not a port from 1 to 65535 (0: the serving port)"},
		"target port 0":                           {args: []string{"--endpoint-selector", "app=x", "--endpoint-target-ports", "8000,0"}, wantErr: `port "0" is not from 1 to 65535`},
		"unknown transport":                       {args: []string{"--pool-name", "p", "--extproc-transport", "h3"}, wantErr: "--extproc-transport"},
		"negative stream cap":                     {args: []string{"--pool-name", "p", "--grpc-max-concurrent-streams", "-1"}, wantErr: "grpc-max-concurrent-streams"},
		"stream cap over HTTP/2's":                {args: []string{"--pool-name", "p", "--grpc-max-concurrent-streams", "4294967296"}, wantErr: "--grpc-max-concurrent-streams"},
		"KV events port out of range":             {args: []string{"--pool-name", "p", "--kv-events-port", "70000"}, wantErr: "--kv-events-port 70000 is not a port from 1 to 65535 (0: KV events off)"},
		"KV events listen address without a port": {args: []string{"--pool-name", "p", "--kv-events-listen", "0.0.0.0"}, wantErr: `--kv-events-listen "0.0.0.0": want host:port`},
		"KV events listen port 0":                 {args: []string{"--pool-name", "p", "--kv-events-listen", ":0"}, wantErr: `--kv-events-listen ":0": port "0" is not from 1 to 65535`},
		"replay port out of range":                {args: []string{"--pool-name", "p", "--kv-events-port", "5557", "--kv-events-replay-port", "-1"}, wantErr: "--kv-events-replay-port -1 is not a port from 1 to 65535 (0: replay off)"},
		"replay without events":                   {args: []string{"--pool-name", "p", "--kv-events-replay-port", "5558"}, wantErr: "needs --kv-events-port"},
		"offload weight past 1":                   {args: []string{"--pool-name", "p", "--kv-events-port", "5557", "--kv-events-offload-weight", "1.5"}, wantErr: "--kv-events-offload-weight"},
		"no replay timeout":                       {args: []string{"--pool-name", "p", "--kv-events-port", "5557", "--kv-events-replay-timeout", "0s"}, wantErr: "--kv-events-replay-timeout"},
		"a flow-control wait of 0":                {args: []string{"--pool-name", "p", "--flow-control", "--flow-control-max-wait", "0s"}, wantErr: "--flow-control-max-wait"},
		"an unknown flow-control ordering":        {args: []string{"--pool-name", "p", "--flow-control", "--flow-control-ordering", "lifo"}, wantErr: `--flow-control-ordering "lifo" must be fcfs or slo-deadline`},
		"a flow-control queue of 0":               {args: []string{"--pool-name", "p", "--flow-control", "--flow-control-max-requests", "0"}, wantErr: "--flow-control-max-requests"},
		"a flow-control band of 0":                {args: []string{"--pool-name", "p", "--flow-control", "--flow-control-max-band-requests=0"}, wantErr: "--flow-control-max-band-requests"},
		"flow-control bytes of 0":                 {args: []string{"--pool-name", "p", "--flow-control", "--flow-control-max-bytes", "0"}, wantErr: "--flow-control-max-bytes"},
		"no tokenize timeout":                     {args: []string{"--pool-name", "p", "--kv-events-port", "5557", "--tokenize-timeout", "0s"}, wantErr: "--tokenize-timeout"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("NAMESPACE", tc.env)
			o, err := parse(t, tc.args...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, o)
		})
	}
}

func TestObjectivePriorities(t *testing.T) {
	o, err := parse(t, "--static-endpoints", "127.0.0.1:1", "--objective-priorities", "interactive=10, batch=-1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{"interactive": 10, "batch": -1}, o.objectives); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if _, err := parse(t, "--static-endpoints", "127.0.0.1:1", "--objective-priorities", "interactive"); err == nil || !strings.Contains(err.Error(), "name=priority") {
		t.Errorf("a pair without a priority: %v, want an error naming the form", err)
	}
}

// A picker without leader election is deployed alone and routes so from its
// first request; one under leader election presumes peers; a count in the
// config file wins over both.
func TestPolicyConfigReplicas(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		file int
		want int
	}{
		"alone":                  {want: 1},
		"under leader election":  {args: []string{"--ha-enable-leader-election"}, want: 0},
		"the leader alone ready": {args: []string{"--ha-enable-leader-election", "--ha-mode", "active-passive"}, want: 1},
		"counted in the config":  {file: 3, want: 3},
		"counted, with election": {args: []string{"--ha-enable-leader-election"}, file: 1, want: 1},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--pool-name", "p"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			o.Policy.CacheAware.Replicas = tc.file
			if got := o.policyConfig().CacheAware.Replicas; got != tc.want {
				t.Errorf("replicas = %d, want %d", got, tc.want)
			}
		})
	}
}

// TestLeaderElectionSettingsWithoutEffectAreWarned: the HA settings that
// change nothing, since no lease is taken, are logged as such at start
// rather than silently ignored.
func TestLeaderElectionSettingsWithoutEffectAreWarned(t *testing.T) {
	cases := map[string]struct {
		args   []string
		warned []string
	}{
		"active-passive without leader election": {
			args:   []string{"--pool-name", "p", "--ha-mode", "active-passive"},
			warned: []string{"--ha-mode"},
		},
		"lease timings without leader election": {
			args:   []string{"--pool-name", "p", "--leader-election-lease-duration", "30s", "--leader-election-renew-deadline", "20s", "--leader-election-retry-period", "4s"},
			warned: []string{"--leader-election-lease-duration", "--leader-election-renew-deadline", "--leader-election-retry-period"},
		},
		"every setting under leader election": {
			args: []string{"--pool-name", "p", "--ha-enable-leader-election", "--ha-mode", "active-passive", "--leader-election-lease-duration", "30s", "--leader-election-renew-deadline", "20s"},
		},
		"active-passive by selector": {
			args: []string{"--endpoint-selector", "app=vllm", "--endpoint-target-ports", "8000", "--ha-enable-leader-election", "--ha-mode", "active-passive"},
		},
		"servers connecting with their KV events to active-active replicas": {
			args:   []string{"--pool-name", "p", "--ha-enable-leader-election", "--kv-events-listen", ":5557"},
			warned: []string{"--kv-events-listen"},
		},
		"servers connecting with their KV events to an active-passive pair": {
			args:   []string{"--pool-name", "p", "--ha-enable-leader-election", "--ha-mode", "active-passive", "--kv-events-listen", ":5557"},
			warned: []string{"--kv-events-listen"},
		},
		"servers connecting with their KV events to one picker": {
			args: []string{"--pool-name", "p", "--kv-events-listen", ":5557"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
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

// TestContextLengthWithStaticEndpointsIsWarned: static endpoints carry no
// context-length label, so a contextLength block routes nothing by length,
// and the picker says so at start.
func TestContextLengthWithStaticEndpointsIsWarned(t *testing.T) {
	checkNoPodLabelWarned(t, "policy: {contextLength: {filter: true}}", "policy.contextLength", "context-length label")
}

// TestLabelFiltersWithStaticEndpointsAreWarned: static endpoints carry no
// labels, so a label filter sees each without its labels, and the picker
// says so at start.
func TestLabelFiltersWithStaticEndpointsAreWarned(t *testing.T) {
	checkNoPodLabelWarned(t, "policy: {labelFilters: [{label: gpu, values: [h100]}]}", "policy.labelFilters", "label for the label filters")
}

// checkNoPodLabelWarned parses a picker of static endpoints with config
// and wants a warning on value saying they carry no pod label; what names
// the label they lack.
func checkNoPodLabelWarned(t *testing.T, config, value, what string) {
	t.Helper()
	o, err := parse(t, "--static-endpoints", "127.0.0.1:8000", "--config-text", config)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(o.Warnings, func(w Warning) bool {
		return w.Value == value && strings.Contains(w.Reason, "no pod label")
	}) {
		t.Errorf("warnings %+v: none says the static endpoints carry no %s", o.Warnings, what)
	}
}

// TestDataParallelFallbacksAreWarned: under policy.dataParallel no
// fallbacks are listed, so a --fallbacks given is warned at start, and so
// is llm-d's maxNumOfEndpoints, never as if --fallbacks listed it instead.
func TestDataParallelFallbacksAreWarned(t *testing.T) {
	const dpHandler = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n" +
		"- type: prefix-cache-scorer\n- {type: max-score-picker, parameters: {maxNumOfEndpoints: 3}}\n- type: data-parallel-profile-handler\n" +
		"schedulingProfiles:\n- name: d\n  plugins:\n  - pluginRef: max-score-picker\n  - pluginRef: prefix-cache-scorer\n"
	const fallbacksWarned = "--fallbacks 2: policy.dataParallel is set"
	const maxEndpointsWarned = "--config-text: max-score-picker maxNumOfEndpoints 3 lists no fallbacks"
	cases := map[string]struct {
		args   []string
		warned []string
	}{
		"--fallbacks under dataParallel": {
			args:   []string{"--pool-name", "p", "--config-text", "policy: {dataParallel: {primaryPort: 8000}}", "--fallbacks", "2"},
			warned: []string{fallbacksWarned},
		},
		"--fallbacks 0 under dataParallel": {
			args: []string{"--pool-name", "p", "--config-text", "policy: {dataParallel: {primaryPort: 8000}}", "--fallbacks", "0"},
		},
		"dataParallel with the default fallbacks": {
			args: []string{"--pool-name", "p", "--config-text", "policy: {dataParallel: {primaryPort: 8000}}"},
		},
		"--fallbacks without dataParallel": {
			args: []string{"--pool-name", "p", "--fallbacks", "2"},
		},
		"llm-d's maxNumOfEndpoints beside the data-parallel handler": {
			args:   []string{"--pool-name", "p", "--config-text", dpHandler},
			warned: []string{maxEndpointsWarned},
		},
		"llm-d's maxNumOfEndpoints and --fallbacks beside the data-parallel handler": {
			args:   []string{"--pool-name", "p", "--config-text", dpHandler, "--fallbacks", "2"},
			warned: []string{maxEndpointsWarned, fallbacksWarned},
		},
		"--fallbacks other than llm-d's maxNumOfEndpoints beside the data-parallel handler: neither listed": {
			args:   []string{"--pool-name", "p", "--config-text", dpHandler, "--fallbacks", "1"},
			warned: []string{maxEndpointsWarned, "--fallbacks 1: policy.dataParallel is set"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, tc.args...)
			if err != nil {
				t.Fatal(err)
			}
			var warned []string
			for _, w := range o.Warnings {
				line := w.Flag + ": " + w.Reason
				if w.Value != "" {
					line = w.Flag + " " + w.Value + ": " + w.Reason
				}
				if strings.Contains(line, "fallback") || strings.Contains(line, "maxNumOfEndpoints") {
					warned = append(warned, line)
				}
			}
			if len(warned) != len(tc.warned) {
				t.Fatalf("warnings of the fallbacks %q, want %d: %q", warned, len(tc.warned), tc.warned)
			}
			for i, w := range tc.warned {
				if !strings.HasPrefix(warned[i], w) {
					t.Errorf("warning %q, want one starting %q", warned[i], w)
				}
			}
		})
	}
}

// The upstream picker's environment switch for its flow-control layer,
// which its chart sets through inferenceExtension.env, turns the queue on as
// upstream's did, with upstream's bounds; it is logged as deprecated
// upstream whatever its value.
func TestUpstreamFlowControlEnvironmentVariable(t *testing.T) {
	upstreamBounds := flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound,
		MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: fileconfig.NoWaitBound}
	cases := map[string]struct {
		env  string
		args []string
		want flowcontrol.Options
	}{
		"on":            {env: "true", want: upstreamBounds},
		"on, spelled 1": {env: "1", want: upstreamBounds},
		"on, with --flow-control: inferpick's bounds": {env: "true", args: []string{"--flow-control"},
			want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: 30 * time.Second}},
		"on, with a bound flag": {env: "true", args: []string{"--flow-control-max-wait", "5s"},
			want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound, MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: 5 * time.Second}},
		"on, with --flow-control=false": {env: "true", args: []string{"--flow-control=false"},
			want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: 30 * time.Second}},
		"off":   {env: "false", want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: 30 * time.Second}},
		"empty": {env: "", want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: 30 * time.Second}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Setenv("ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER", tc.env)
			o, err := parse(t, append([]string{"--static-endpoints", "127.0.0.1:1"}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, o.FlowControl); diff != "" {
				t.Errorf("flow control (-want +got):\n%s", diff)
			}
			deprecated := 0
			for _, w := range o.Warnings {
				if w.Flag == "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER" && w.Message == deprecatedMessage && strings.Contains(w.Reason, "featureGates: [flowControl]") {
					deprecated++
				}
			}
			if deprecated != 1 {
				t.Errorf("%d deprecation warnings of the variable, want 1: %+v", deprecated, o.Warnings)
			}
		})
	}
}

// The config file's flowControl feature gate turns the queue on, and its
// flowControl section sets the bounds, each flag given on the command line
// winning with a warning when the two differ.
func TestConfigFileFlowControl(t *testing.T) {
	const doc = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
	defaults := flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: 30 * time.Second}
	section := "flowControl:\n  maxRequests: 500\n  maxBytes: 128Mi\n  defaultRequestTTL: 10s\n  defaultPriorityBand: {maxRequests: 50}\n"
	cases := map[string]struct {
		config string
		args   []string
		want   flowcontrol.Options
		warned []string // what the warnings' reasons say, in order
	}{
		"gate alone: upstream's bounds": {
			config: doc + "featureGates: [flowControl]\n",
			want:   flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound, MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: fileconfig.NoWaitBound},
		},
		"gate and section": {
			config: doc + "featureGates: [flowControl]\n" + section,
			want:   flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: 500, MaxBandLen: 50, MaxBytes: 128 << 20, MaxWait: 10 * time.Second},
		},
		"gate and a section of one key: upstream's for the others": {
			config: doc + "featureGates: [flowControl]\nflowControl: {defaultRequestTTL: 1m}\n",
			want:   flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound, MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: time.Minute},
		},
		"section with --flow-control: inferpick's for the others": {
			config: doc + "flowControl: {defaultRequestTTL: 1m}\n",
			args:   []string{"--flow-control"},
			want:   flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: 1024, MaxBandLen: 256, MaxBytes: 64 << 20, MaxWait: time.Minute},
		},
		"flags win, warning where they differ": {
			config: doc + "featureGates: [flowControl]\n" + section,
			args: []string{"--flow-control", "--flow-control-max-requests=500", "--flow-control-max-band-requests=20",
				"--flow-control-max-bytes=1000", "--flow-control-max-wait=3s"},
			want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: 500, MaxBandLen: 20, MaxBytes: 1000, MaxWait: 3 * time.Second},
			warned: []string{
				"flowControl.defaultPriorityBand.maxRequests 50 has no effect: --flow-control-max-band-requests 20 is given",
				"flowControl.maxBytes 134217728 has no effect: --flow-control-max-bytes 1000 is given",
				"flowControl.defaultRequestTTL 10s has no effect: --flow-control-max-wait 3s is given",
			},
		},
		"deadline ordering, warning that flows are served in turn": {
			config: doc + "featureGates: [flowControl]\nflowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy}\n",
			want: flowcontrol.Options{Ordering: flowcontrol.OrderDeadline, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound,
				MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: fileconfig.NoWaitBound},
			warned: []string{"each flow by earliest deadline (as round-robin-fairness-policy), not the earliest deadline across the band"},
		},
		"deadline ordering with round-robin fairness": {
			config: doc + "featureGates: [flowControl]\nflowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy, fairnessPolicyRef: round-robin-fairness-policy}\n",
			want: flowcontrol.Options{Ordering: flowcontrol.OrderDeadline, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound,
				MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: fileconfig.NoWaitBound},
		},
		"the ordering flag wins, warning": {
			config: doc + "featureGates: [flowControl]\nflowControl:\n  defaultPriorityBand: {orderingPolicyRef: slo-deadline-ordering-policy, fairnessPolicyRef: round-robin-fairness-policy}\n",
			args:   []string{"--flow-control-ordering=fcfs"},
			want: flowcontrol.Options{Ordering: flowcontrol.OrderFCFS, Enabled: true, MaxLen: fileconfig.NoRequestBound, MaxBandLen: fileconfig.NoRequestBound,
				MaxBytes: fileconfig.UpstreamBandBytes, MaxWait: fileconfig.NoWaitBound},
			warned: []string{"flowControl.defaultPriorityBand.orderingPolicyRef slo-deadline has no effect: --flow-control-ordering fcfs is given"},
		},
		"section without the queue": {
			config: doc + section,
			want:   defaults,
			warned: []string{"flowControl has no effect: the flow-control queue is off"},
		},
		"gate, with --flow-control=false": {
			config: doc + "featureGates: [flowControl]\n",
			args:   []string{"--flow-control=false"},
			want:   defaults,
			warned: []string{"--flow-control=false is given, so there is none"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--static-endpoints", "127.0.0.1:1", "--config-text", tc.config}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, o.FlowControl); diff != "" {
				t.Errorf("flow control (-want +got):\n%s", diff)
			}
			var got []string
			for _, w := range o.Warnings {
				got = append(got, w.Reason)
			}
			if len(got) != len(tc.warned) {
				t.Fatalf("warnings %q, want ones saying %q", got, tc.warned)
			}
			for i, w := range tc.warned {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %q does not say %q", got[i], w)
				}
			}
		})
	}
}

// A context-length weight under a policy that weighs no scores (the
// config's, or --policy's) is accepted with a warning that only the filter
// applies; the pods' label is the one the config names.
func TestContextLengthWeightWithoutScoresWarns(t *testing.T) {
	const config = "policy:\n  contextLength: {label: example.com/tokens, filter: true}\n  weightedScorer: {contextLengthWeight: 3}\n"
	for name, tc := range map[string]struct {
		args   []string
		warned bool
	}{
		"weighted-scorer":      {args: []string{"--policy", "weighted-scorer"}},
		"cache-aware":          {args: []string{"--policy", "cache-aware"}, warned: true},
		"cache-aware, default": {warned: true},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := parse(t, append([]string{"--static-endpoints", "127.0.0.1:1", "--config-text", config}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			warned := false
			for _, w := range o.Warnings {
				warned = warned || strings.Contains(w.Reason, "weightedScorer.contextLengthWeight 3 has no effect") && w.Flag == "--config-text"
			}
			if warned != tc.warned {
				t.Errorf("warnings %+v; a warning that the weight has no effect: %v, want %v", o.Warnings, warned, tc.warned)
			}
			if got := contextLengthLabel(o.Policy); got != "example.com/tokens" {
				t.Errorf("the pods' label read is %q, want example.com/tokens", got)
			}
		})
	}
	o, err := parse(t, "--static-endpoints", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	if got := contextLengthLabel(o.Policy); got != "" {
		t.Errorf("without a contextLength block the label %q is read", got)
	}
}
