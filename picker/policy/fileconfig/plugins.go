package fileconfig

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/portnum"
)

// role is what a known plugin type becomes here.
type role struct {
	// weight selects the weighted scorer's weight a scorer adds to.
	weight func(*policy.WeightedScorerConfig) *float64
	// inProfile: the plugin may be listed in a scheduling profile.
	inProfile bool
	// cacheAware: in a profile, the plugin makes the policy cache-aware.
	cacheAware bool
}

// known are the plugin types translated; any other is rejected by
// checkPlugin with what to use instead.
var known = map[string]role{
	"queue-scorer": {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.QueueWeight }},
	"kv-cache-utilization-scorer": {weight: func(w *policy.WeightedScorerConfig) *float64 {
		return &w.KVWeight
	}},
	"prefix-cache-scorer":  {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.PrefixWeight }},
	"lora-affinity-scorer": {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.LoRAWeight }},
	// Scorers of load: the weighted scorer's load scores (loadscores.go).
	activeRequestScorer: {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.ActiveRequestWeight }},
	runningScorer:       {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.RunningWeight }},
	loadAwareScorer:     {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.LoadAwareWeight }},
	noHitScorer:         {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.NoHitLRUWeight }},
	// llm-d's session affinity (session.go): the scorer weighs the
	// session's pod, the filter pins the session there.
	sessionScorer: {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.SessionWeight }},
	sessionFilter: {inProfile: true},
	// llm-d's scorer and filter of the pods by their context-length
	// label (contextlength.go).
	contextLengthAware: {weight: func(w *policy.WeightedScorerConfig) *float64 { return &w.ContextLengthWeight }},
	// llm-d's scorer of the prefixes the pods' KV-cache events show.
	"precise-prefix-cache-scorer": {cacheAware: true},
	"max-score-picker":            {inProfile: true},
	"single-profile-handler":      {},
	"metrics-data-source":         {},
	"core-metrics-extractor":      {},
	"utilization-detector":        {},
	// In a profile as upstream's sample of the reporter lists it. The
	// picker reads both OpenAI HTTP requests and vLLM's gRPC engine API
	// (Generate, Embed) whichever parser is named, by the request's path.
	openAIParser:   {inProfile: true},
	vllmGRPCParser: {inProfile: true},
	// Upstream's reporter of each response's usage (reporter.go); its
	// sample lists it in the profile too.
	attributeReporter: {inProfile: true},
	// llm-d's filters of the pods that decode (labelled llm-d.ai/role
	// decode, or a role that includes it, or not labelled) and of those
	// that prefill: the picker's own split of the pool's pods by their
	// label, read in every config (disagg.go). With one profile there is
	// no prefill stage, and decode-filter keeps the pods that decode.
	decodeFilter:  {inProfile: true},
	prefillFilter: {inProfile: true},
	// llm-d's filter of the pods that encode (labelled encode,
	// encode-prefill or encode-prefill-decode), in the encode profile.
	encodeFilter: {inProfile: true},
	// llm-d's filters of the pods by their labels: the policy's label
	// filters of the stage whose profile lists them (labels.go).
	byLabel:         {inProfile: true},
	byLabelSelector: {inProfile: true},
	// llm-d's prefill/decode profile handlers, their deciders, and the
	// handlers that name the prefill pod to the decode pod's sidecar,
	// which the picker does itself (disagg.go).
	pdHandler: {},
	// llm-d's data-parallel handler: the policy's dataParallel
	// (dataparallel.go).
	dpHandler:      {},
	disaggHandler:  {},
	prefixDecider:  {},
	alwaysDecider:  {},
	mmDecider:      {},
	prefillHeaders: {},
	disaggHeaders:  {},
	// llm-d's tokenizer (for precise-prefix-cache-scorer) and the source
	// of the pool's endpoints it is fed from: the picker tokenizes on the
	// model servers and follows the pool's pods itself.
	"tokenizer":                    {inProfile: true},
	"endpoint-notification-source": {},
	// Upstream's flow-control policies that inferpick's queue stands for,
	// named by the flowControl section (see readFlowControl).
	fcfsOrdering:     {},
	sloDeadline:      {},
	roundRobin:       {},
	globalStrict:     {},
	staticUsageLimit: {},
	// Upstream's latency plugins: the policy's slo block (latency.go).
	// The affinity filters and the weighted-random picker load only
	// beside a predictor; the admitter acts wherever it is listed.
	latencyProducer:        {inProfile: true},
	predictedLatencyScorer: {inProfile: true},
	latencyScorer:          {inProfile: true},
	tierFilter:             {inProfile: true},
	sloAdmitter:            {inProfile: true},
	affinityFilter:         {inProfile: true},
	weightedRandom:         {inProfile: true},
}

// instead says what to use for plugin types that are not translated.
var instead = map[string]string{
	"random-picker":                "policy: {name: random}",
	"weighted-random-picker":       "policy: {name: power-of-two} or random",
	"token-load-scorer":            "active-request-scorer, which scores the requests this picker has in flight on each pod by their number (inferpick does not estimate the tokens in flight)",
	"prefix-cache-affinity-filter": "policy: {name: cache-aware} with cacheAware.mode threshold and matchThreshold",
	"passthrough-parser":           "openai-parser (vllmgrpc-parser for vLLM's gRPC engine API)",
}

// checkPlugin validates a plugin entry and records what its parameters ask.
func (u *upstream) checkPlugin(p plugin) error {
	if _, ok := known[p.typ]; !ok {
		if alt, ok := instead[p.typ]; ok {
			return fmt.Errorf("line %d: plugin type %q is not supported: use %s", p.line, p.typ, alt)
		}
		return fmt.Errorf("line %d: plugin type %q is not supported: use inferpick's own policy block (see docs/policy.md)", p.line, p.typ)
	}
	if p.params != nil && p.params.Kind != yaml.MappingNode && !isNull(p.params) {
		return fmt.Errorf("line %d: parameters of %s must be a mapping", p.params.Line, p.typ)
	}
	switch p.typ {
	case "prefix-cache-scorer":
		if hasParams(p) {
			u.warn("parameters of prefix-cache-scorer have no effect: the prefix index uses 64-byte blocks and sizes itself from vllm:cache_config_info")
		}
	case "precise-prefix-cache-scorer":
		return u.readPrecise(p)
	case "utilization-detector":
		return u.readDetector(p)
	case "metrics-data-source":
		return u.readDataSource(p)
	case "core-metrics-extractor":
		return u.readExtractor(p)
	case maxScorePicker, weightedRandom:
		return u.readPicker(p)
	case latencyProducer, predictedLatencyScorer, latencyScorer, tierFilter, sloAdmitter, affinityFilter:
		return u.readLatency(p)
	case activeRequestScorer:
		return u.readActiveRequest(p)
	case loadAwareScorer:
		return u.readLoadAware(p)
	case noHitScorer:
		return u.readNoHit(p)
	case sessionScorer:
		return u.readSessionScorer(p)
	case sessionFilter:
		return u.readSessionFilter(p)
	case contextLengthAware:
		return u.readContextLength(p)
	case byLabel, byLabelSelector:
		return u.readLabelFilter(p)
	case pdHandler:
		return u.readPDHandler(p)
	case dpHandler:
		return u.readDPHandler(p)
	case disaggHandler:
		return u.readDisaggHandler(p)
	case prefixDecider:
		return u.readPrefixDecider(p)
	case prefillHeaders, disaggHeaders:
		return u.readHeaderHandler(p)
	case attributeReporter:
		return u.readReporter(p)
	case "tokenizer":
		if hasParams(p) {
			u.warn(fmt.Sprintf("parameters of tokenizer (%s) have no effect: with precise-prefix-cache-scorer, prompts are tokenized by the model servers (/tokenize) for the model each request names", strings.Join(paramNames(p), ", ")))
		}
	default:
		// Upstream's factories of the other known types read no
		// parameters: whatever is given changes nothing there either.
		if hasParams(p) {
			u.warn(fmt.Sprintf("parameters of %s (%s) have no effect: it takes none", p.typ, strings.Join(paramNames(p), ", ")))
		}
	}
	return nil
}

// readPicker reads a picker's maxNumOfEndpoints (the max-score or the
// weighted-random picker's): how many endpoints the destination header
// lists, the primary and its fallbacks. Upstream takes a value under 1 as 1.
func (u *upstream) readPicker(p plugin) error {
	if !hasParams(p) {
		return nil
	}
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		if k.Value != "maxNumOfEndpoints" {
			u.warn(fmt.Sprintf("%s parameter %s has no effect: the picker takes maxNumOfEndpoints only", p.typ, k.Value))
			continue
		}
		n, err := integer(p.typ, k.Value, v)
		if err != nil {
			return err
		}
		if n < 1 {
			u.warn(fmt.Sprintf("%s maxNumOfEndpoints %d is taken as 1, as upstream does: the primary endpoint alone, no fallback", p.typ, n))
			n = 1
		}
		u.maxEndpoints[p.name] = n
	}
	return nil
}

// integer reads a parameter that must be a whole number, of any sign.
func integer(typ, key string, v *yaml.Node) (int, error) {
	n, err := strconv.Atoi(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: %s %s %q is not a whole number", v.Line, typ, key, v.Value)
	}
	return n, nil
}

// boolean reads a parameter, named by what in errors, that must be true or
// false.
func boolean(what string, v *yaml.Node) (bool, error) {
	b, err := strconv.ParseBool(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil {
		return false, fmt.Errorf("line %d: %s %q is not true or false", v.Line, what, v.Value)
	}
	return b, nil
}

// hasParams reports whether the plugin is given any parameter.
func hasParams(p plugin) bool { return p.params != nil && len(p.params.Content) > 0 }

// paramNames lists the names of the plugin's parameters.
func paramNames(p plugin) []string {
	var names []string
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		names = append(names, p.params.Content[i].Value)
	}
	return names
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.Tag == "!!null" }

// readPrecise reads llm-d's precise-prefix-cache-scorer: the pods' KV-cache
// events become --kv-events-port, --kv-events-listen and --kv-events-topic
// (llm-d's defaults: 5557, none and "kv@"). Its tokenizer and block-hash settings have nothing to
// match here: the index keys a block by its token ids, takes the block
// size from the events and tokenizes on the model servers.
func (u *upstream) readPrecise(p plugin) error {
	u.out.KVEventsPort, u.out.KVEventsTopic = 5557, "kv@"
	if p.params == nil {
		return nil
	}
	inert := false
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "tokenProcessorConfig", "indexerConfig":
			inert = true
		case "kvEventsConfig":
			if err := u.readKVEvents(v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("line %d: unknown precise-prefix-cache-scorer parameter %q", k.Line, k.Value)
		}
	}
	if inert {
		u.warn("tokenProcessorConfig and indexerConfig of precise-prefix-cache-scorer have no effect: the KV-event index keys a block by its token ids (no hash seed to match), takes the block size from the events and tokenizes prompts on the model servers (/tokenize)")
	}
	return nil
}

// readKVEvents reads kvEventsConfig: the picker subscribes to every pod of
// the pool, as llm-d's pod discovery does, and listens where zmqEndpoint
// says for the pods that connect to it; with discoverPods false it dials
// none, and without zmqEndpoint then reads no event (with a warning).
func (u *upstream) readKVEvents(cfg *yaml.Node) error {
	if cfg.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: kvEventsConfig must be a mapping", cfg.Line)
	}
	discover := true
	for i := 0; i+1 < len(cfg.Content); i += 2 {
		k, v := cfg.Content[i], cfg.Content[i+1]
		switch k.Value {
		case "zmqEndpoint":
			if v.Value == "" {
				continue
			}
			addr, err := zmqListen(v.Value)
			if err != nil {
				return fmt.Errorf("line %d: kvEventsConfig.zmqEndpoint %q: %w", v.Line, v.Value, err)
			}
			u.out.KVEventsListen = addr
		case "topicFilter":
			u.out.KVEventsTopic = v.Value
		case "podDiscoveryConfig":
			if port := lookup(v, "socketPort"); port != nil {
				n, err := portnum.Parse(port.Value)
				if err != nil {
					return fmt.Errorf("line %d: podDiscoveryConfig.socketPort: %w", port.Line, err)
				}
				u.out.KVEventsPort = n
			}
		case "discoverPods":
			b, err := boolean("kvEventsConfig.discoverPods", v)
			if err != nil {
				return err
			}
			discover = b
		case "concurrency":
			// The picker follows every pod of the pool, each on its own
			// goroutine.
		default:
			return fmt.Errorf("line %d: unknown kvEventsConfig field %q", k.Line, k.Value)
		}
	}
	if !discover {
		// As llm-d, no pod is dialled: the picker reads what the pods
		// send to zmqEndpoint, if it is given, and else no event at all.
		u.out.KVEventsPort = 0
		if u.out.KVEventsListen == "" {
			u.warn("kvEventsConfig with discoverPods false and no zmqEndpoint reads no KV-cache events, as llm-d's scorer subscribes to nothing then: the cache-aware policy goes by the prefixes the picker routed itself (set zmqEndpoint, or discoverPods true, to read the pods' events)")
		}
	}
	return nil
}

// zmqListen returns the address to listen on for a zmqEndpoint,
// tcp://HOST:PORT: every address of the pod at PORT, whatever HOST names
// ("*", "0.0.0.0", "::", empty, or the picker's own name or IP).
func zmqListen(endpoint string) (string, error) {
	rest, ok := strings.CutPrefix(endpoint, "tcp://")
	if !ok {
		return "", errors.New("only tcp://HOST:PORT is served")
	}
	_, port, err := net.SplitHostPort(rest)
	if err != nil {
		return "", err
	}
	if _, err := portnum.Parse(port); err != nil {
		return "", err
	}
	return ":" + port, nil
}

func (u *upstream) readDataSource(p plugin) error {
	if p.params == nil {
		return nil
	}
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "path":
			u.out.MetricsPath = v.Value
		case "scheme":
			if v.Value != "http" {
				return fmt.Errorf("line %d: metrics-data-source scheme %q is not supported: model servers are scraped over http", v.Line, v.Value)
			}
		case "insecureSkipVerify":
			// Only meaningful with https.
		default:
			return fmt.Errorf("line %d: unknown metrics-data-source parameter %q", k.Line, k.Value)
		}
	}
	return nil
}

// readExtractor reads core-metrics-extractor's defaultEngine: vLLM's and
// SGLang's names are what the scraper reads by default (--model-server-type
// auto); TensorRT-LLM's (trtllm-serve, Triton's backend) become the trtllm
// preset.
func (u *upstream) readExtractor(p plugin) error {
	if p.params == nil {
		return nil
	}
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		if k.Value != "defaultEngine" {
			return fmt.Errorf("line %d: core-metrics-extractor parameter %q is not supported: every pod's metrics are read with one engine's names (defaultEngine, or --model-server-type and the per-metric flags such as --total-queued-requests-metric)", k.Line, k.Value)
		}
		u.engine = v.Value
		switch v.Value {
		case "vllm", "sglang", "default":
		case "trtllm-serve", "triton-tensorrt-llm":
			u.out.ModelServerType = "trtllm"
		default:
			return fmt.Errorf("line %d: core-metrics-extractor engine %q is not supported: use vllm, sglang, trtllm-serve or triton-tensorrt-llm", v.Line, v.Value)
		}
	}
	return nil
}
