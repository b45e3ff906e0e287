package main

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/policy/fileconfig"
)

// Upstream defaults that need no note when a values file repeats them.
const (
	upstreamImage      = "registry.k8s.io/gateway-api-inference-extension/epp"
	upstreamPlugins    = "default-plugins.yaml"
	upstreamSecretName = "inference-gateway-sa-metrics-reader-secret"
)

// Flags the chart sets itself, with the value that controls each.
var chartFlags = map[string]string{
	"pool-name":                 "pool.name",
	"pool-namespace":            "the release namespace",
	"pool-group":                "the chart (inference.networking.k8s.io)",
	"config-file":               "picker.config",
	"grpc-port":                 "the chart (9002; service.grpcPort is the Service's)",
	"grpc-health-port":          "the chart (9003)",
	"metrics-port":              "the chart (9090; service.metricsPort is the Service's)",
	"cert-path":                 "tls.secretName",
	"client-ca-path":            "tls.clientCASecretName",
	"ha-enable-leader-election": "replicas (on when more than 1)",
	"drain-timeout":             "picker.drainTimeoutSeconds",
}

// Flags with a value of their own in the inferpick chart.
var flagValues = map[string]string{
	"v":                           "picker.verbosity",
	"refresh-metrics-interval":    "picker.refreshMetricsInterval",
	"metrics-staleness-threshold": "picker.metricsStalenessThreshold",
	"model-server-metrics-port":   "picker.modelServerMetrics.port",
	"model-server-metrics-path":   "picker.modelServerMetrics.path",
	"model-server-type":           "picker.modelServerType",
	"fallbacks":                   "picker.fallbacks",
	"policy":                      "picker.policy",
	"max-request-body-bytes":      "picker.maxRequestBodyBytes",
	"max-buffered-body-bytes":     "picker.maxBufferedBodyBytes",
	"grpc-keepalive-time":         "picker.keepalive.time",
	"grpc-keepalive-timeout":      "picker.keepalive.timeout",
	"secure-serving":              "tls.enabled",
	"metrics-endpoint-auth":       "metrics.auth",
	"metrics-secure-serving":      "metrics.secureServing",
	"ha-mode":                     "haMode",
}

// Flag values the inferpick chart takes as integers. The upstream chart
// renders every flag as a string, so `v: "2"` works there.
var intValues = map[string]bool{
	"picker.verbosity":               true,
	"picker.modelServerMetrics.port": true,
	"picker.fallbacks":               true,
	"picker.maxRequestBodyBytes":     true,
	"picker.maxBufferedBodyBytes":    true,
}

// Model-server types: upstream's names to inferpick's.
var serverTypes = map[string]string{
	"vllm": "vllm", "sglang": "sglang", "triton-tensorrt-llm": "trtllm", "trtllm-serve": "trtllm",
}

// converter moves keys from the upstream values (in) to inferpick's (out);
// what is left in in at the end had no place and is noted.
type converter struct {
	in, out map[string]any
	notes   []string
	flags   *flag.FlagSet
	// noPlugins is why the plugins config the values name was not read,
	// for the notes that depend on what it gives.
	noPlugins string
}

// Convert returns inferpick values for the upstream values in data, and
// notes on what changed meaning or was dropped.
func Convert(data []byte) ([]byte, []string, error) {
	in := map[string]any{}
	if err := yaml.Unmarshal(data, &in); err != nil {
		return nil, nil, fmt.Errorf("read upstream values: %w", err)
	}
	if in == nil {
		in = map[string]any{}
	}
	c := &converter{in: in, out: map[string]any{}, flags: flag.NewFlagSet("inferpick", flag.ContinueOnError)}
	app.NewOptions().AddFlags(c.flags)
	c.extension()
	c.pool()
	c.provider()
	c.route()
	c.objectives()
	c.leftovers(nil, c.in)

	body, err := yaml.Marshal(c.out)
	if err != nil {
		return nil, nil, err
	}
	var b bytes.Buffer
	b.WriteString("# inferpick chart values converted from upstream inferencepool chart values\n# by hack/migrate-values (docs/migrating.md).\n")
	for _, n := range c.notes {
		b.WriteString("# - " + n + "\n")
	}
	b.Write(body)
	return b.Bytes(), c.notes, nil
}

func (c *converter) note(format string, args ...any) {
	c.notes = append(c.notes, fmt.Sprintf(format, args...))
}

// take removes the value at the dotted path from the upstream values.
func (c *converter) take(path string) (any, bool) {
	keys := strings.Split(path, ".")
	m := c.in
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			return nil, false
		}
		m = next
	}
	v, ok := m[keys[len(keys)-1]]
	delete(m, keys[len(keys)-1])
	return v, ok && v != nil
}

// peek reads the value at the dotted path of the upstream values without
// taking it.
func (c *converter) peek(path string) (any, bool) {
	var v any = c.in
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, false
		}
		v = m[k]
	}
	return v, v != nil
}

// move carries the value at from over to to, when set.
func (c *converter) move(from, to string) {
	if v, ok := c.take(from); ok {
		c.set(to, v)
	}
}

// moveNumber is move, with a string holding a whole number written as
// that number.
func (c *converter) moveNumber(from, to string) {
	if v, ok := c.take(from); ok {
		c.set(to, wholeNumber(v))
	}
}

// set writes v at the dotted path of the inferpick values.
func (c *converter) set(path string, v any) {
	keys := strings.Split(path, ".")
	m := c.out
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// get reads the dotted path of the inferpick values written so far.
func (c *converter) get(path string) any {
	var v any = c.out
	for _, k := range strings.Split(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func (c *converter) extraArg(arg string) {
	args, _ := c.get("picker.extraArgs").([]any)
	c.set("picker.extraArgs", append(args, arg))
}

func (c *converter) extension() {
	const ie = "inferenceExtension."
	// The upstream chart renders these unquoted (replicas through int), so
	// a quoted number works there; the chart's schema wants integers.
	c.moveNumber(ie+"replicas", "replicas")
	c.moveNumber(ie+"extProcPort", "service.grpcPort")
	c.moveNumber(ie+"metricsPort", "service.metricsPort")
	c.move(ie+"failureMode", "pool.failureMode")
	c.move(ie+"affinity", "affinity")
	c.move(ie+"tolerations", "tolerations")
	c.move(ie+"resources", "resources")
	c.move(ie+"volumes", "extraVolumes")
	c.move(ie+"volumeMounts", "extraVolumeMounts")
	c.move(ie+"image.pullPolicy", "image.pullPolicy")
	if v, ok := c.take(ie + "env"); ok {
		c.set("env", envList(v))
		c.flowControlEnv()
	}
	reg, _ := c.take(ie + "image.registry")
	repo, _ := c.take(ie + "image.repository")
	tag, _ := c.take(ie + "image.tag")
	if img := fmt.Sprintf("%v/%v", reg, repo); reg != nil && img != upstreamImage {
		c.note("inferenceExtension.image %s:%v is not used: inferpick runs its own image (image.repository, image.tag)", img, tag)
	}
	for _, k := range []string{"extraContainerPorts", "extraServicePorts"} {
		if v, ok := c.take(ie + k); ok && !empty(v) {
			c.note("inferenceExtension.%s dropped: the chart exposes grpc, grpc-health and http-metrics only; put a sidecar's ports on the sidecar", k)
		}
	}
	c.pluginsConfig()
	c.flagMap()
	c.monitoring()
	c.sidecar()
	if on, _ := c.take(ie + "tracing.enabled"); on == true {
		c.tracing()
	}
	c.take(ie + "tracing")
	c.latencyPredictor()
	c.move(ie+"metricsDataSource.path", "picker.modelServerMetrics.path")
	if s, ok := c.take(ie + "metricsDataSource.scheme"); ok && s != "http" {
		c.note("inferenceExtension.metricsDataSource.scheme %v dropped: inferpick scrapes model servers over plain HTTP", s)
	}
	c.take(ie + "metricsDataSource.insecureSkipVerify")
	if es, ok := c.take(ie + "endpointsServer"); ok && !empty(es) {
		c.note("inferenceExtension.endpointsServer dropped: the chart serves an InferencePool; for a pool-less picker run it with --endpoint-selector and --endpoint-target-ports")
	}
}

// latencyPredictor drops upstream's latency predictor values: what its
// plugins do is the policy's slo block (set by pluginsConfig from the
// plugins the picker reads), and the picker learns its predictions itself,
// with no training or prediction sidecar.
func (c *converter) latencyPredictor() {
	const lp = "inferenceExtension.latencyPredictor."
	on, _ := c.take(lp + "enabled")
	var dropped []string
	for _, k := range []string{"trainingServer", "predictionServers", "eppEnv"} {
		if v, ok := c.take(lp + k); ok && !empty(v) {
			dropped = append(dropped, k)
		}
	}
	c.take("inferenceExtension.latencyPredictor")
	if on != true {
		return
	}
	if len(dropped) > 0 {
		c.note("inferenceExtension.latencyPredictor.%s dropped: the picker learns its latency predictions itself, no sidecar is needed", strings.Join(dropped, ", "))
	}
	if c.get("picker.config.slo") == nil {
		why := ""
		if c.noPlugins != "" {
			why = ": " + c.noPlugins
		}
		c.note("inferenceExtension.latencyPredictor.enabled has no effect here: the plugins config the values name (pluginsConfigFile) gives no slo block%s (set picker.config.slo to route by latency objectives)", why)
	}
}

// upstreamTracing is what the upstream chart renders as OTEL variables when
// tracing is on: each value of the values' tracing block, or the chart's
// default. Without them the picker's OTLP exporter would dial
// localhost:4317 over TLS and sample every request.
var upstreamTracing = []struct{ key, env, def string }{
	{"otelExporterEndpoint", "OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4317"},
	{"sampling.sampler", "OTEL_TRACES_SAMPLER", "parentbased_traceidratio"},
	{"sampling.samplerArg", "OTEL_TRACES_SAMPLER_ARG", "0.1"},
}

// tracing turns tracing on with the OTEL variables the upstream chart
// renders. A variable the values' env sets already is left to it: upstream
// lists that env after its own, so it wins there too.
func (c *converter) tracing() {
	c.extraArg("--tracing=true")
	env, _ := c.get("env").([]any)
	set := map[string]bool{}
	for _, e := range env {
		if m, ok := e.(map[string]any); ok {
			set[fmt.Sprint(m["name"])] = true
		}
	}
	for _, t := range upstreamTracing {
		v, ok := c.take("inferenceExtension.tracing." + t.key)
		if !ok {
			v = t.def
		}
		if !set[t.env] {
			env = append(env, map[string]any{"name": t.env, "value": text(v)})
		}
	}
	sort.Slice(env, func(i, j int) bool { return fmt.Sprint(env[i]) < fmt.Sprint(env[j]) })
	c.set("env", env)
}

// upstreamFlowControlEnv is upstream's (deprecated) environment switch for
// its flow-control layer, which the picker refuses without --flow-control.
const upstreamFlowControlEnv = "ENABLE_EXPERIMENTAL_FLOW_CONTROL_LAYER"

// flowControlEnv takes upstreamFlowControlEnv out of env: set true, it
// turns the queue on.
func (c *converter) flowControlEnv() {
	env, _ := c.get("env").([]any)
	kept := env[:0]
	for _, e := range env {
		m, ok := e.(map[string]any)
		if !ok || m["name"] != upstreamFlowControlEnv {
			kept = append(kept, e)
			continue
		}
		if on, err := strconv.ParseBool(fmt.Sprint(m["value"])); err == nil && on {
			c.flowControl(fileconfig.FlowControl{})
			c.note("inferenceExtension.env %s becomes picker.flowControl.enabled, with upstream's bounds (its bounds: picker.flowControl)", upstreamFlowControlEnv)
		}
	}
	if env != nil {
		c.set("env", kept)
	}
}

// flowControl turns the chart's queue on with the bounds upstream's queue
// had: those of fc (the flowControl section), upstream's defaults for the
// rest. The chart passes every bound as a flag, which wins over the file.
func (c *converter) flowControl(fc fileconfig.FlowControl) {
	fc = fc.WithUpstreamDefaults()
	c.set("picker.flowControl.enabled", true)
	c.set("picker.flowControl.maxRequests", fc.MaxRequests)
	c.set("picker.flowControl.maxBandRequests", fc.MaxBandRequests)
	c.set("picker.flowControl.maxBytes", fc.MaxBytes)
	c.set("picker.flowControl.maxWait", fc.MaxWait.String())
	if fc.Ordering != "" {
		c.set("picker.flowControl.ordering", fc.Ordering)
	}
}

// envList turns upstream's env (a list, or the map its comments show) into
// a list of EnvVars.
func envList(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make([]any, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, map[string]any{"name": k, "value": text(m[k])})
	}
	return out
}

// pluginsConfig translates a custom EndpointPickerConfig into the picker's
// policy values, as the picker itself would read it.
// upstreamInterval is the upstream chart's monitoring.interval default.
const upstreamInterval = "10s"

// maxFallbacks is the most picker.fallbacks the chart's schema allows.
const maxFallbacks = 16

func (c *converter) pluginsConfig() {
	const ie = "inferenceExtension."
	file, _ := c.take(ie + "pluginsConfigFile")
	custom, _ := c.take(ie + "pluginsCustomConfig")
	name, _ := file.(string)
	if name == "" {
		name = upstreamPlugins
	}
	docs, _ := custom.(map[string]any)
	doc, ok := docs[name].(string)
	if !ok {
		if name != upstreamPlugins {
			c.noPlugins = fmt.Sprintf("%s is not in pluginsCustomConfig", name)
			c.note("inferenceExtension.pluginsConfigFile %s is not in pluginsCustomConfig: the picker's default policy (cache-aware) is used", name)
			return
		}
		if on, _ := c.peek(ie + "latencyPredictor.enabled"); on == true {
			// The upstream chart's default plugins are then its latency
			// pipeline, which the picker reads as cache-aware with the
			// slo block, admission, and the producer's default
			// streamingMode false: the whole response is learned.
			c.set("picker.config.slo", map[string]any{"admission": true, "wholeResponse": true})
			c.note("inferenceExtension.latencyPredictor.enabled becomes picker.config.slo {admission: true, wholeResponse: true}: a request stating x-slo-ttft-ms goes to the pods predicted to complete its response within it, ranked by the cache-aware policy, and a sheddable one that none is predicted to meet is refused; x-slo-tpot-ms is not judged, as upstream's predicted-latency-producer does without streamingMode")
			return
		}
		c.note("upstream's default scheduling profile (queue 2, KV cache 2, prefix 3) is inferpick's weighted-scorer; the picker now uses its default cache-aware policy (set picker.config.name: weighted-scorer to keep upstream's scoring)")
		return
	}
	f, err := fileconfig.Parse([]byte(doc))
	if err != nil {
		c.noPlugins = fmt.Sprintf("pluginsCustomConfig[%s] is refused (%v)", name, err)
		c.note("inferenceExtension.pluginsCustomConfig[%s] dropped: %v; the picker's default policy (cache-aware) is used", name, err)
		return
	}
	for _, w := range f.Warnings {
		c.note("pluginsCustomConfig[%s]: %s", name, w)
	}
	b, err := yaml.Marshal(f.Policy)
	if err != nil {
		c.note("inferenceExtension.pluginsCustomConfig[%s] dropped: %v", name, err)
		return
	}
	policy := map[string]any{}
	if err := yaml.Unmarshal(b, &policy); err == nil && !prune(policy) {
		c.set("picker.config", policy)
	}
	if d := f.Policy.Disaggregation; d != nil {
		// A block that is there, even all zero (every request prefilled
		// apart), turns disaggregation on: set it whatever prune left.
		// Its label filters and prefillPods go with it.
		block := map[string]any{}
		if b, err := yaml.Marshal(d); err == nil {
			_ = yaml.Unmarshal(b, &block)
		}
		block["minUncachedTokens"] = d.MinUncachedTokens
		c.set("picker.config.disaggregation", block)
	}
	if f.Policy.SLO != nil {
		// A block that is there, even empty, turns routing by latency
		// objectives on: set it whatever prune left.
		block := map[string]any{}
		if b, err := yaml.Marshal(f.Policy.SLO); err == nil {
			_ = yaml.Unmarshal(b, &block)
		}
		c.set("picker.config.slo", block)
	}
	if f.MetricsPath != "" {
		c.set("picker.modelServerMetrics.path", f.MetricsPath)
	}
	if f.KVEventsPort != 0 {
		c.set("picker.kvEvents.port", f.KVEventsPort)
	}
	if f.KVEventsTopic != "" {
		c.set("picker.kvEvents.topic", f.KVEventsTopic)
	}
	if port, ok := strings.CutPrefix(f.KVEventsListen, ":"); ok {
		if n, err := strconv.Atoi(port); err == nil {
			c.set("picker.kvEvents.listenPort", n)
			c.note("pluginsCustomConfig[%s]: kvEventsConfig.zmqEndpoint becomes picker.kvEvents.listenPort, opened on the Service as kv-events: point the pods' --kv-events-config endpoint at tcp://<the release's Service>:%d; each pod's connection reaches one picker replica only", name, n)
		}
	}
	if f.ModelServerType != "" {
		c.set("picker.modelServerType", f.ModelServerType)
	}
	if len(f.Attributes) > 0 {
		c.attributes(name, f.Attributes)
	}
	switch on, _ := c.get("picker.flowControl.enabled").(bool); {
	case f.FlowControl.Gate:
		c.flowControl(f.FlowControl)
		c.note("pluginsCustomConfig[%s]: featureGate flowControl becomes picker.flowControl.enabled, with the bounds of its flowControl section and upstream's for the rest", name)
	case on && f.FlowControl.Section:
		c.flowControl(f.FlowControl)
	case f.FlowControl.Section:
		c.note("pluginsCustomConfig[%s]: flowControl has no effect without featureGate flowControl, as upstream: the queue stays off", name)
	}
	if f.MaxEndpoints > 0 {
		// The primary and its fallbacks, as the picker reads the file.
		n := f.MaxEndpoints - 1
		if n > maxFallbacks {
			c.note("pluginsCustomConfig[%s]: max-score-picker maxNumOfEndpoints %d is over the chart's %d fallbacks: picker.fallbacks is %d", name, f.MaxEndpoints, maxFallbacks, maxFallbacks)
			n = maxFallbacks
		}
		c.set("picker.fallbacks", n)
	}
	for k := range docs {
		if k != name {
			c.note("inferenceExtension.pluginsCustomConfig[%s] dropped: only the file named by pluginsConfigFile is used", k)
		}
	}
}

// attributes carries the request-attribute-reporters' attributes of the
// file named name to picker.attributes, in the file's order, so that the
// gateway keeps getting them.
func (c *converter) attributes(name string, attrs []attrexpr.Attribute) {
	list := make([]any, 0, len(attrs))
	keys := make([]string, 0, len(attrs))
	for _, a := range attrs {
		item := map[string]any{"namespace": a.Namespace, "name": a.Name, "expression": a.Expression.String()}
		if a.Condition != nil {
			item["condition"] = a.Condition.String()
		}
		list = append(list, item)
		keys = append(keys, a.Namespace+"/"+a.Name)
	}
	c.set("picker.attributes", list)
	c.note("pluginsCustomConfig[%s]: request-attribute-reporter attributes %s become picker.attributes, reported to the gateway as before", name, strings.Join(keys, ", "))
}

// flagValues returns the upstream flags by name. Charts up to v1.1 list them
// as {name, value} entries, later ones map names to values.
func (c *converter) flagValues(v any) map[string]any {
	switch v := v.(type) {
	case nil:
		return nil
	case map[string]any:
		return v
	case []any:
		flags := make(map[string]any, len(v))
		for i, e := range v {
			entry, _ := e.(map[string]any)
			name, _ := entry["name"].(string)
			if name == "" {
				c.note("inferenceExtension.flags[%d] dropped: an entry without a name", i)
				continue
			}
			flags[name] = entry["value"]
		}
		return flags
	default:
		c.note("inferenceExtension.flags dropped: neither a map of flags nor a list of {name, value}")
		return nil
	}
}

// flagMap places each upstream flag: a value of its own, the chart's, an
// extra argument the picker accepts, or a note.
func (c *converter) flagMap() {
	v, _ := c.take("inferenceExtension.flags")
	flags := c.flagValues(v)
	// The upstream chart writes JSON lines (--zap-encoder json, before the
	// flags, so an encoder of the flags wins); the picker's own default is
	// console text.
	if _, ok := flags["zap-encoder"]; !ok {
		c.extraArg("--zap-encoder=json")
	}
	if _, ok := flags["enable-pprof"]; !ok {
		c.note("/debug/pprof/ is no longer served: the upstream picker serves it by default, inferpick's only with --enable-pprof (add it to picker.extraArgs)")
	}
	for _, name := range slices.Sorted(maps.Keys(flags)) {
		val := flags[name]
		switch {
		case name == "tracing":
			// The upstream chart renders --tracing=<tracing.enabled> after
			// the flags, and the last one counts.
			c.note("flag --tracing dropped: the upstream chart overrides it with inferenceExtension.tracing.enabled, which the conversion follows")
		case flagValues[name] != "":
			to := flagValues[name]
			switch to {
			case "picker.modelServerType":
				val = serverTypes[fmt.Sprint(val)]
			case "tls.enabled", "metrics.auth", "metrics.secureServing":
				b, err := strconv.ParseBool(text(val))
				if err != nil {
					c.note("flag --%s %q dropped: not a boolean (true or false); %s keeps its default", name, text(val), to)
					continue
				}
				val = b
				if !b {
					c.offApart(name)
				}
			}
			if intValues[to] {
				val = wholeNumber(val)
			}
			c.set(to, val)
		case chartFlags[name] != "":
			c.note("flag --%s dropped: the chart sets it from %s", name, chartFlags[name])
		case c.flags.Lookup(name) != nil:
			if isBool(c.flags.Lookup(name)) {
				on, err := strconv.ParseBool(text(val))
				if err != nil {
					c.note("flag --%s %q dropped: not a boolean (true or false), which the picker would refuse at start", name, text(val))
					continue
				}
				if !on {
					c.offApart(name)
				}
			}
			c.extraArg("--" + name + "=" + text(val))
		default:
			c.note("flag --%s dropped: the picker has no such flag", name)
		}
	}
}

// offApart notes a boolean flag of the values set false: the upstream chart
// renders it as two arguments, --name then "false", and the upstream
// picker's pflag skips the second and turns the flag on. The converted
// values turn it off, as written, as the picker reads those two arguments.
// A metrics-endpoint-auth whose monitoring auth the values set is not
// noted: that setting is moved over the flag's (metrics.auth), and says
// what the upstream picker did (off: the chart turns the flag off itself).
func (c *converter) offApart(name string) {
	if name == "metrics-endpoint-auth" {
		if _, ok := c.peek("inferenceExtension.monitoring.prometheus.auth.enabled"); ok {
			return
		}
	}
	c.note("flag --%[1]s false is off now: the upstream chart passed it as two arguments (--%[1]s \"false\"), which the upstream picker read as on", name)
}

// isBool reports whether f is a boolean flag.
func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// text writes a value of the values file as a flag or variable reads it.
// Numbers are read as float64, whose %v turns 2000000 into 2e+06, which an
// integer flag refuses; a whole number is written out in full.
func text(v any) string {
	if f, ok := v.(float64); ok && f == math.Trunc(f) && math.Abs(f) < 1e21 {
		return strconv.FormatFloat(f, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}

// wholeNumber returns a string holding a whole number as that number, and
// any other value as it is (for the chart's schema to refuse).
func wholeNumber(v any) any {
	if s, ok := v.(string); ok {
		if n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64); err == nil {
			return n
		}
	}
	return v
}

func (c *converter) monitoring() {
	const m = "inferenceExtension.monitoring."
	// Upstream scrapes every 10s unless the values say otherwise; the
	// chart's own default is 30s.
	c.set("metrics.serviceMonitor.interval", upstreamInterval)
	c.move(m+"interval", "metrics.serviceMonitor.interval")
	if on, ok := c.take(m + "prometheus.enabled"); ok {
		c.set("metrics.serviceMonitor.enabled", on)
	}
	c.move(m+"prometheus.auth.enabled", "metrics.auth")
	if s, ok := c.take(m + "prometheus.auth.secretName"); ok && s != upstreamSecretName {
		c.note("monitoring.prometheus.auth.secretName %v dropped: the chart makes its own token Secret <fullname>-metrics-reader (or set metrics.serviceMonitor.tokenSecret to a Secret you keep)", s)
	}
	if l, ok := c.take(m + "prometheus.extraLabels"); ok && !empty(l) {
		c.set("metrics.serviceMonitor.labels", l)
	}
}

// sidecar turns upstream's single sidecar block into a container of
// sidecars.
func (c *converter) sidecar() {
	const s = "inferenceExtension.sidecar."
	on, _ := c.take(s + "enabled")
	if on != true {
		c.take("inferenceExtension.sidecar")
		return
	}
	container := map[string]any{}
	for _, k := range []string{"name", "image", "imagePullPolicy", "args", "env", "ports", "livenessProbe", "readinessProbe", "resources", "volumeMounts"} {
		if v, ok := c.take(s + k); ok {
			container[k] = v
		}
	}
	if cmd, ok := c.take(s + "command"); ok {
		container["command"] = []any{cmd}
	}
	c.set("sidecars", []any{container})
	if v, ok := c.take(s + "volumes"); ok {
		vols, _ := c.get("extraVolumes").([]any)
		more, _ := v.([]any)
		c.set("extraVolumes", append(vols, more...))
		if b, _ := yaml.Marshal(v); bytes.Contains(b, []byte("{{")) {
			c.note("sidecar.volumes used templates: the chart does not render them in values; write the names out")
		}
	}
	if cm, ok := c.take(s + "configMap"); ok && !empty(cm) {
		c.note("sidecar.configMap dropped: create the ConfigMap the sidecar mounts yourself")
	}
}

func (c *converter) pool() {
	const p = "inferencePool."
	if v, ok := c.take(p + "targetPorts"); ok {
		var ports []any
		list, _ := v.([]any)
		for _, e := range list {
			if m, ok := e.(map[string]any); ok {
				ports = append(ports, wholeNumber(m["number"]))
			}
		}
		c.set("pool.targetPorts", ports)
	}
	if v, ok := c.take(p + "targetPortNumber"); ok && c.get("pool.targetPorts") == nil {
		c.set("pool.targetPorts", []any{wholeNumber(v)})
	}
	if v, ok := c.take(p + "modelServers.matchLabels"); ok {
		c.set("pool.selector.matchLabels", labelValues(v))
	}
	if t, ok := c.take(p + "modelServerType"); ok {
		if to, known := serverTypes[fmt.Sprint(t)]; known {
			c.set("picker.modelServerType", to)
		} else {
			c.note("inferencePool.modelServerType %v is unknown: picker.modelServerType left at auto", t)
		}
	}
	if proto, ok := c.take(p + "modelServerProtocol"); ok && proto == "grpc" {
		// The picker routes vLLM's gRPC engine API (Generate, Embed) as
		// upstream's vllmgrpc-parser does, and OpenAI HTTP requests beside.
		c.set("pool.appProtocol", "kubernetes.io/h2c")
	}
	if parser, ok := c.take(p + "parser"); ok && parser != "" && parser != "openai-parser" && parser != "vllmgrpc-parser" {
		c.note("inferencePool.parser %v dropped: the picker parses OpenAI requests and vLLM's gRPC engine API", parser)
	}
	if v, ok := c.take(p + "apiVersion"); ok && v != "inference.networking.k8s.io/v1" {
		c.note("inferencePool.apiVersion %v dropped: the chart makes an inference.networking.k8s.io/v1 pool", v)
	}
	if c.get("pool.selector.matchLabels") == nil {
		c.note("inferencePool.modelServers.matchLabels is not set (the upstream chart requires it): set pool.selector.matchLabels")
	}
}

// labelValues quotes each value of a selector, as the upstream chart's
// template does: `version: 2` selects the label "2" there, and the chart's
// schema takes strings only.
func labelValues(v any) any {
	m, ok := v.(map[string]any)
	if !ok {
		return v
	}
	out := make(map[string]any, len(m))
	for k, val := range m {
		if val == nil {
			out[k] = ""
			continue
		}
		out[k] = text(val)
	}
	return out
}

func (c *converter) provider() {
	name, _ := c.take("provider.name")
	n := strings.ToLower(fmt.Sprint(name))
	if name == nil {
		n = "none"
	}
	switch n {
	case "none", "gke", "istio":
		if n != "none" {
			c.set("provider.name", n)
		}
	default:
		c.note("provider.name %v dropped: the chart knows none, gke and istio", name)
	}
	if n == "gke" {
		c.move("provider.gke.autopilot", "provider.gke.autopilot")
		// Upstream scrapes with Managed Prometheus on GKE only when
		// Prometheus monitoring is on, and makes no ServiceMonitor there.
		on, _ := c.get("metrics.serviceMonitor.enabled").(bool)
		c.set("provider.gke.podMonitoring", on)
		c.set("metrics.serviceMonitor.enabled", false)
	}
	if n == "istio" {
		c.istioHost()
		if tp, ok := c.take("provider.istio.destinationRule.trafficPolicy"); ok && !empty(tp) {
			c.set("provider.istio.destinationRule.trafficPolicy", tp)
		}
	}
	c.take("provider.gke")
	c.take("provider.istio")
}

// upstreamPickerHost matches the host of the upstream picker's Service,
// <release>-epp.<namespace>.svc.<cluster domain>.
var upstreamPickerHost = regexp.MustCompile(`^[a-z0-9.-]+-epp\.[a-z0-9-]+\.svc\.(.+)$`)

// istioHost carries the DestinationRule's host, unless it names the
// upstream picker's Service, which the upgrade removes: the inferpick
// chart's default names its own Service, in the same cluster domain.
func (c *converter) istioHost() {
	const key = "provider.istio.destinationRule.host"
	v, ok := c.take(key)
	if !ok {
		return
	}
	host := fmt.Sprint(v)
	m := upstreamPickerHost.FindStringSubmatch(host)
	if m == nil {
		c.set(key, v)
		return
	}
	if m[1] != "cluster.local" {
		c.set("clusterDomain", m[1])
	}
	c.note("provider.istio.destinationRule.host %s names the upstream picker's Service, which the upgrade removes: the DestinationRule names the inferpick Service (clusterDomain %s)", host, m[1])
}

func (c *converter) route() {
	const r = "experimentalHttpRoute."
	on, _ := c.take(r + "enabled")
	gw, _ := c.take(r + "inferenceGatewayName")
	timeout, hasTimeout := c.take(r + "requestTimeout")
	if base, ok := c.take(r + "baseModel"); ok && base != "" {
		c.note("experimentalHttpRoute.baseModel %v dropped: add the X-Gateway-Base-Model-Name header match to your own HTTPRoute", base)
	}
	if on != true {
		return
	}
	c.set("httpRoute.enabled", true)
	switch gw {
	case nil:
		c.set("httpRoute.gateway.name", "inference-gateway")
	case "":
		// Upstream's empty name is <release>-inference-gateway; the
		// release is not in the values.
		c.note("experimentalHttpRoute.inferenceGatewayName is empty: the upstream chart's route goes to the Gateway <release>-inference-gateway; set httpRoute.gateway.name to that name")
	default:
		c.set("httpRoute.gateway.name", gw)
	}
	switch {
	case c.get("provider.name") == "gke":
		// GKE takes the timeout from the GCPBackendPolicy.
		c.set("httpRoute.requestTimeout", "")
	case hasTimeout:
		c.set("httpRoute.requestTimeout", timeout)
	}
}

// objectives gives the chart's InferenceObjectives their priorities by flag:
// the chart makes no InferenceObjective objects. One without a priority
// has 0, as upstream gives an objective whose priority is unset.
func (c *converter) objectives() {
	v, _ := c.take("inferenceObjectives")
	list, _ := v.([]any)
	var pairs []string
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			prio := m["priority"]
			if prio == nil {
				prio = 0.0
			}
			pairs = append(pairs, fmt.Sprintf("%v=%s", m["name"], text(prio)))
		}
	}
	if len(pairs) > 0 {
		c.extraArg("--objective-priorities=" + strings.Join(pairs, ","))
		c.note("inferenceObjectives become --objective-priorities; the chart makes no InferenceObjective objects (those of an upstream release are deleted by the upgrade: recreate them to keep other fields)")
	}
}

// leftovers notes every upstream value no step took.
func (c *converter) leftovers(path []string, v any) {
	m, ok := v.(map[string]any)
	if !ok {
		if !empty(v) {
			c.note("%s dropped: no inferpick equivalent", strings.Join(path, "."))
		}
		return
	}
	for _, k := range slices.Sorted(maps.Keys(m)) {
		c.leftovers(append(slices.Clone(path), k), m[k])
	}
}

func empty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case map[string]any:
		return len(x) == 0
	case []any:
		return len(x) == 0
	case string:
		return x == ""
	case bool:
		return !x
	}
	return false
}

// prune removes the zero values a marshalled policy.Config carries (empty
// blocks, a 0s duration) and reports whether nothing is left.
func prune(m map[string]any) bool {
	for k, v := range m {
		switch x := v.(type) {
		case map[string]any:
			if prune(x) {
				delete(m, k)
			}
		case string:
			if x == "0s" || x == "" {
				delete(m, k)
			}
		}
	}
	return len(m) == 0
}
