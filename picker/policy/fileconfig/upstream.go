package fileconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

const endpointPickerKind = "EndpointPickerConfig"

// API versions of EndpointPickerConfig read here: the upstream endpoint
// picker's and llm-d's router's.
var apiVersions = map[string]bool{
	"inference.networking.x-k8s.io/v1alpha1": true,
	"llm-d.ai/v1alpha1":                      true,
}

// plugin is one entry of the plugins list.
type plugin struct {
	name, typ string
	params    *yaml.Node
	line      int
}

// upstream collects what the document's fields ask for.
type upstream struct {
	out     File
	plugins map[string]plugin
	// order holds the plugins' names in the order of the document.
	order []string
	// maxEndpoints holds the maxNumOfEndpoints of the pickers that set it,
	// by plugin name.
	maxEndpoints map[string]int
	// sessions holds the header of each session plugin, and what it
	// carries, by name.
	sessions map[string]sessionSource
	// sessionProfiles holds the profileName each session plugin gives,
	// checked once the profiles are known.
	sessionProfiles []sessionProfileRef
	// stages is the prefill/decode profile handler, nil when there is
	// none; deciders holds what each prefix-based-pd-decider asks, by name;
	// headerProfiles the prefillProfile each header handler names.
	stages *stages
	// dataParallel is the data-parallel profile handler, nil when there
	// is none (dataparallel.go).
	dataParallel   *dataParallel
	deciders       map[string]decider
	headerProfiles []profileRef
	// headerEncodeProfiles the encodeProfile each header handler names.
	headerEncodeProfiles []profileRef
	// loadTunings holds what each load scorer's parameters tune, by name;
	// tunedBy the load scorer whose tuning the policy took, by type
	// (loadscores.go).
	loadTunings map[string]loadTuning
	tunedBy     map[string]string
	// legacyMetrics: featureGates lists enableLegacyMetrics; engine is a
	// core-metrics-extractor's defaultEngine (flowcontrol.go).
	legacyMetrics bool
	engine        string
	// labelFilters holds the filter each by-label and by-label-selector
	// plugin is, by name (labels.go).
	labelFilters map[string]policy.LabelFilter
	// attrKeys holds the line of each request-attribute-reporter's key.
	attrKeys attrKeys
	// latency holds what each latency plugin's parameters ask of the slo
	// block, by name (latency.go).
	latency map[string]latencyParams
}

// fromUpstream translates an EndpointPickerConfig: one scheduling profile of
// the queue, KV-cache and prefix-cache scorers and a max-score picker
// becomes the weighted-scorer policy with the profile's weights. The fields
// that name plugins are read once plugins is, wherever they stand.
func fromUpstream(doc *yaml.Node) (File, error) {
	u := &upstream{plugins: map[string]plugin{}, maxEndpoints: map[string]int{}, sessions: map[string]sessionSource{}, deciders: map[string]decider{}, labelFilters: map[string]policy.LabelFilter{}}
	refs := map[string]*yaml.Node{}
	for i := 0; i+1 < len(doc.Content); i += 2 {
		k, v := doc.Content[i], doc.Content[i+1]
		var err error
		switch k.Value {
		case "kind":
		case "apiVersion":
			if !apiVersions[v.Value] {
				err = fmt.Errorf("line %d: apiVersion %q is not supported: use inference.networking.x-k8s.io/v1alpha1", v.Line, v.Value)
			}
		case "plugins":
			err = u.readPlugins(v)
		case "featureGates":
			err = u.readFeatureGates(v)
		case "schedulingProfiles", "saturationDetector", "parser", "requestHandler", "dataLayer", "flowControl":
			refs[k.Value] = v
		default:
			err = fmt.Errorf("line %d: unknown field %q in %s", k.Line, k.Value, endpointPickerKind)
		}
		if err != nil {
			return File{}, err
		}
	}
	for _, f := range []struct {
		key  string
		read func(*yaml.Node) error
	}{
		{"dataLayer", u.readDataLayer},
		{"saturationDetector", u.readSaturation},
		{"parser", u.readParserRef},
		{"requestHandler", u.readRequestHandler},
		{"flowControl", u.readFlowControl},
	} {
		if n := refs[f.key]; n != nil {
			if err := f.read(n); err != nil {
				return File{}, err
			}
		}
	}
	if err := u.readProfiles(refs["schedulingProfiles"]); err != nil {
		return File{}, err
	}
	u.applyLegacyMetrics()
	return u.out, nil
}

// dataSources are the dataLayer sources read, each with the extractors it
// may feed: what the picker does itself, scraping the model servers'
// metrics and following the pool's pods for the KV-event index.
var dataSources = map[string][]string{
	"metrics-data-source":          {"core-metrics-extractor"},
	"endpoint-notification-source": {"precise-prefix-cache-scorer"},
}

// readDataLayer checks dataLayer.sources against dataSources.
func (u *upstream) readDataLayer(n *yaml.Node) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: dataLayer must be a mapping", n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "sources" {
			return fmt.Errorf("line %d: unknown dataLayer field %q", k.Line, k.Value)
		}
		if v.Kind != yaml.SequenceNode {
			return fmt.Errorf("line %d: dataLayer.sources must be a list", v.Line)
		}
		for _, src := range v.Content {
			if err := u.readLayerSource(src); err != nil {
				return err
			}
		}
	}
	return nil
}

// readLayerSource checks one source and the extractors it feeds.
func (u *upstream) readLayerSource(src *yaml.Node) error {
	if src.Kind != yaml.MappingNode || lookup(src, "pluginRef") == nil {
		return fmt.Errorf("line %d: a dataLayer source needs a pluginRef", src.Line)
	}
	ref := lookup(src, "pluginRef")
	p, ok := u.plugins[ref.Value]
	if !ok {
		return fmt.Errorf("line %d: dataLayer source pluginRef %q names no plugin in plugins", ref.Line, ref.Value)
	}
	feeds, ok := dataSources[p.typ]
	if !ok {
		return fmt.Errorf("line %d: dataLayer source %q (%s) is not supported: inferpick scrapes the model servers' metrics (metrics-data-source) and follows the pool's pods (endpoint-notification-source) itself", ref.Line, p.name, p.typ)
	}
	for i := 0; i+1 < len(src.Content); i += 2 {
		k, v := src.Content[i], src.Content[i+1]
		switch k.Value {
		case "pluginRef":
		case "extractors":
			if v.Kind != yaml.SequenceNode {
				return fmt.Errorf("line %d: extractors must be a list", v.Line)
			}
			for _, e := range v.Content {
				eref := lookup(e, "pluginRef")
				if eref == nil {
					return fmt.Errorf("line %d: a dataLayer extractor needs a pluginRef", e.Line)
				}
				ep, ok := u.plugins[eref.Value]
				if !ok {
					return fmt.Errorf("line %d: dataLayer extractor pluginRef %q names no plugin in plugins", eref.Line, eref.Value)
				}
				if !slices.Contains(feeds, ep.typ) {
					return fmt.Errorf("line %d: dataLayer extractor %q (%s) of %s is not supported: %s feeds %s only", eref.Line, ep.name, ep.typ, p.typ, p.typ, strings.Join(feeds, ", "))
				}
			}
		default:
			return fmt.Errorf("line %d: unknown dataLayer source field %q", k.Line, k.Value)
		}
	}
	return nil
}

func (u *upstream) readPlugins(list *yaml.Node) error {
	if list.Kind != yaml.SequenceNode {
		return fmt.Errorf("line %d: plugins must be a list", list.Line)
	}
	for _, item := range list.Content {
		if item.Kind != yaml.MappingNode {
			return fmt.Errorf("line %d: a plugin must be a mapping with a type", item.Line)
		}
		p := plugin{line: item.Line}
		for i := 0; i+1 < len(item.Content); i += 2 {
			k, v := item.Content[i], item.Content[i+1]
			switch k.Value {
			case "name":
				p.name = v.Value
			case "type":
				p.typ = v.Value
			case "parameters":
				p.params = v
			default:
				return fmt.Errorf("line %d: unknown plugin field %q", k.Line, k.Value)
			}
		}
		if p.typ == "" {
			return fmt.Errorf("line %d: plugin has no type", p.line)
		}
		if p.name == "" {
			p.name = p.typ
		}
		if _, dup := u.plugins[p.name]; dup {
			return fmt.Errorf("line %d: plugin name %q is used twice", p.line, p.name)
		}
		if err := u.checkPlugin(p); err != nil {
			return err
		}
		u.plugins[p.name] = p
		u.order = append(u.order, p.name)
	}
	return nil
}

// readSaturation maps saturationDetector.pluginRef, which must name a
// utilization-detector, onto the policy's saturation thresholds.
func (u *upstream) readSaturation(n *yaml.Node) error {
	ref := lookup(n, "pluginRef")
	if ref == nil {
		return nil // the upstream default is the utilization detector
	}
	p, ok := u.plugins[ref.Value]
	if !ok && ref.Value == "utilization-detector" {
		return nil // upstream makes one with its default thresholds
	}
	if !ok {
		return fmt.Errorf("line %d: saturationDetector.pluginRef %q names no plugin in plugins", ref.Line, ref.Value)
	}
	if p.typ != "utilization-detector" {
		return fmt.Errorf("line %d: saturation detector %q (%s) is not supported: use a utilization-detector", ref.Line, p.name, p.typ)
	}
	return nil
}

// readDetector maps a utilization-detector's thresholds.
func (u *upstream) readDetector(p plugin) error {
	if p.params == nil {
		return nil
	}
	for i := 0; i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		var err error
		switch k.Value {
		case "queueDepthThreshold":
			u.out.Policy.QueueThreshold, err = strconv.Atoi(v.Value)
		case "kvCacheUtilThreshold":
			u.out.Policy.KVCacheThreshold, err = readFraction(v)
		case "metricsStalenessThreshold":
			u.out.Policy.MetricsStaleness.Duration, err = time.ParseDuration(v.Value)
		case "headroom":
			u.warn("utilization-detector parameter headroom has no effect: a saturated worker is never a candidate")
		default:
			return fmt.Errorf("line %d: unknown utilization-detector parameter %q", k.Line, k.Value)
		}
		if err != nil {
			return fmt.Errorf("line %d: utilization-detector %s: %w", v.Line, k.Value, err)
		}
	}
	return nil
}

// readFraction reads a number in [0,1] (NaN, which ParseFloat takes, is
// none), so that the error names the file's line; Config.Validate would
// refuse it too, without the line.
func readFraction(v *yaml.Node) (float64, error) {
	f, err := strconv.ParseFloat(v.Value, 64)
	if err != nil || !(f >= 0 && f <= 1) {
		return 0, fmt.Errorf("%q must be a number in [0,1]", v.Value)
	}
	return f, nil
}

func (u *upstream) readParserRef(n *yaml.Node) error {
	ref := lookup(n, "pluginRef")
	if ref == nil {
		return fmt.Errorf("line %d: parser needs a pluginRef", n.Line)
	}
	return u.checkParser(ref)
}

// readRequestHandler reads llm-d's requestHandler.parsers list.
func (u *upstream) readRequestHandler(n *yaml.Node) error {
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Value != "parsers" {
			return fmt.Errorf("line %d: unknown requestHandler field %q", k.Line, k.Value)
		}
		for _, item := range v.Content {
			ref := lookup(item, "pluginRef")
			if ref == nil {
				return fmt.Errorf("line %d: parser needs a pluginRef", item.Line)
			}
			if err := u.checkParser(ref); err != nil {
				return err
			}
		}
	}
	return nil
}

// The parsers of requests upstream names: the picker reads both OpenAI
// HTTP requests and vLLM's gRPC engine API, whichever is named.
const (
	openAIParser   = "openai-parser"
	vllmGRPCParser = "vllmgrpc-parser"
)

func (u *upstream) checkParser(ref *yaml.Node) error {
	p, ok := u.plugins[ref.Value]
	if !ok && ref.Value == openAIParser {
		return nil // upstream makes one
	}
	if !ok {
		return fmt.Errorf("line %d: parser pluginRef %q names no plugin in plugins", ref.Line, ref.Value)
	}
	if p.typ != openAIParser && p.typ != vllmGRPCParser {
		return fmt.Errorf("line %d: parser %q (%s) is not supported: inferpick reads OpenAI-style bodies (openai-parser) and vLLM's gRPC engine API (vllmgrpc-parser)", ref.Line, p.name, p.typ)
	}
	return nil
}

func (u *upstream) warn(msg string) { u.out.Warnings = append(u.out.Warnings, msg) }
