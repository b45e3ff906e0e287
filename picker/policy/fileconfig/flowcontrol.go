package fileconfig

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inferpick/inferpick/picker/flowcontrol"
)

// FlowControl is what an EndpointPickerConfig asks of the flow-control
// queue: featureGates' flowControl and the flowControl section, in the
// terms of inferpick's --flow-control bounds.
type FlowControl struct {
	// Gate: featureGates lists flowControl, which turns the queue on.
	Gate bool
	// Section: the document has a flowControl section.
	Section bool
	// The bounds the section sets (--flow-control-max-requests,
	// -max-band-requests, -max-bytes and -max-wait), 0 where it sets none.
	// Upstream's 0, no bound, is NoRequestBound or NoWaitBound.
	MaxRequests, MaxBandRequests int
	MaxBytes                     int64
	MaxWait                      time.Duration
	// Ordering is the order the priority bands' orderingPolicyRef asks
	// for (--flow-control-ordering): fcfs or slo-deadline; "" when no
	// band names one.
	Ordering string
}

// Upstream's defaults, which WithUpstreamDefaults fills in.
const (
	// NoRequestBound stands for upstream's unbounded request counts (its
	// maxRequests of 0 or omitted, globally and per priority band).
	NoRequestBound = math.MaxInt32
	// NoWaitBound stands for upstream's defaultRequestTTL of 0 or omitted:
	// a request waits until its client goes away.
	NoWaitBound = 2562047 * time.Hour
	// UpstreamBandBytes is the bytes upstream lets each priority band hold
	// (1 GB) when defaultPriorityBand.maxBytes is omitted; upstream bounds
	// no bytes across bands unless maxBytes is given.
	UpstreamBandBytes = 1_000_000_000
)

// WithUpstreamDefaults returns the bounds with upstream's defaults in place
// of those the section leaves out: a queue turned on by upstream's switches
// behaves as upstream's did.
func (fc FlowControl) WithUpstreamDefaults() FlowControl {
	if fc.MaxRequests == 0 {
		fc.MaxRequests = NoRequestBound
	}
	if fc.MaxBandRequests == 0 {
		fc.MaxBandRequests = NoRequestBound
	}
	if fc.MaxBytes == 0 {
		fc.MaxBytes = UpstreamBandBytes
	}
	if fc.MaxWait == 0 {
		fc.MaxWait = NoWaitBound
	}
	return fc
}

// The flow-control policies upstream names by default, which inferpick's
// queue matches or stands close to.
const (
	fcfsOrdering      = "fcfs-ordering-policy"
	sloDeadline       = "slo-deadline-ordering-policy"
	roundRobin        = "round-robin-fairness-policy"
	globalStrict      = "global-strict-fairness-policy"
	staticUsageLimit  = "static-usage-limit-policy"
	flowControlPolicy = "the flow-control queue serves each priority's flows round-robin"
)

// orderings maps upstream's ordering policies to inferpick's
// --flow-control-ordering.
var orderings = map[string]string{fcfsOrdering: flowcontrol.OrderFCFS, sloDeadline: flowcontrol.OrderDeadline}

// readFeatureGates reads featureGates: flowControl turns the queue on,
// enableLegacyMetrics is applied once the plugins are read
// (applyLegacyMetrics), dataLayer and prepareDataPlugins (no-ops
// upstream) warn, any other is refused.
func (u *upstream) readFeatureGates(v *yaml.Node) error {
	if v.Kind != yaml.SequenceNode {
		if isNull(v) {
			return nil
		}
		return fmt.Errorf("line %d: featureGates must be a list", v.Line)
	}
	for _, g := range v.Content {
		switch g.Value {
		case "flowControl":
			u.out.FlowControl.Gate = true
		case "dataLayer":
			u.warn("featureGate dataLayer has no effect: upstream turns its data layer on without it, and inferpick scrapes the model servers' metrics itself")
		case "prepareDataPlugins":
			u.warn("featureGate prepareDataPlugins has no effect: it turned on upstream's data-preparing plugins (v1.3 and v1.4), such as the prefix match llm-d's prefill deciders read; the picker keeps its prefix index itself")
		case "enableLegacyMetrics":
			u.legacyMetrics = true
		default:
			return fmt.Errorf("line %d: featureGate %q is not supported: upstream knows flowControl, dataLayer and enableLegacyMetrics", g.Line, g.Value)
		}
	}
	return nil
}

// applyLegacyMetrics applies featureGate enableLegacyMetrics. Upstream
// then polls the model servers with the metric names and path of its
// flags and builds no data layer: a core-metrics-extractor's defaultEngine
// and a metrics-data-source's path change nothing there, and here the
// flags' names and path are read too (--model-server-type, the per-metric
// flags such as --total-queued-requests-metric, and
// --model-server-metrics-path).
func (u *upstream) applyLegacyMetrics() {
	if !u.legacyMetrics {
		return
	}
	if u.engine != "" {
		u.warn(fmt.Sprintf("core-metrics-extractor defaultEngine %s has no effect with featureGate enableLegacyMetrics: upstream then reads the metric names of its flags and ignores the data layer, and so does inferpick (--model-server-type and the per-metric flags such as --total-queued-requests-metric)", u.engine))
		u.out.ModelServerType = ""
	}
	if u.out.MetricsPath != "" {
		u.warn(fmt.Sprintf("metrics-data-source path %s has no effect with featureGate enableLegacyMetrics: upstream then scrapes the path of its flag and ignores the data layer, and so does inferpick (--model-server-metrics-path)", u.out.MetricsPath))
		u.out.MetricsPath = ""
	}
}

// readFlowControl reads the flowControl section onto the queue's bounds.
func (u *upstream) readFlowControl(n *yaml.Node) error {
	fc := &u.out.FlowControl
	fc.Section = true
	if isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: flowControl must be a mapping", n.Line)
	}
	// bands holds the request bound and the ordering of each priority band
	// the section sets (upstream's 0 when a band omits the bound); inferpick
	// has one bound and one ordering for every priority.
	var bands []bandBound
	hasDefault := false
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "maxRequests":
			fc.MaxRequests, err = readRequests("flowControl.maxRequests", v)
		case "maxBytes":
			var b int64
			if b, err = readQuantity("flowControl.maxBytes", v); err == nil && b > 0 {
				fc.MaxBytes = b
			}
		case "defaultRequestTTL":
			fc.MaxWait, err = readTTL(v)
		case "defaultPriorityBand":
			var b bandBound
			if b, err = u.readBand("flowControl.defaultPriorityBand", v); err == nil {
				bands, hasDefault = append(bands, b), true
			}
		case "priorityBands":
			if v.Kind != yaml.SequenceNode {
				return fmt.Errorf("line %d: flowControl.priorityBands must be a list", v.Line)
			}
			for j, item := range v.Content {
				b, err := u.readBand(fmt.Sprintf("flowControl.priorityBands[%d]", j), item)
				if err != nil {
					return err
				}
				bands = append(bands, b)
			}
		case "usageLimitPolicyPluginRef":
			err = u.checkFlowPolicy(v, "usageLimitPolicyPluginRef", []string{staticUsageLimit},
				"inferpick has no adaptive usage limit: a request waits while every endpoint is saturated (the policy's thresholds); remove it")
		default:
			return fmt.Errorf("line %d: unknown flowControl field %q: upstream's are maxRequests, maxBytes, defaultRequestTTL, defaultPriorityBand, priorityBands and usageLimitPolicyPluginRef", k.Line, k.Value)
		}
		if err != nil {
			return err
		}
	}
	var err error
	if fc.Ordering, err = bandOrdering(bands, hasDefault); err != nil {
		return err
	}
	for _, b := range bands {
		u.warnFairness(b)
		if b.requests != bands[0].requests {
			return fmt.Errorf("line %d: %s.maxRequests %s differs from %s.maxRequests %s: inferpick bounds the waiting requests of every priority alike "+
				"(--flow-control-max-band-requests); give the bands one maxRequests, or set defaultPriorityBand.maxRequests alone",
				b.line, b.key, requestsText(b.requests), bands[0].key, requestsText(bands[0].requests))
		}
	}
	if len(bands) > 0 {
		fc.MaxBandRequests = bands[0].requests
	}
	return nil
}

// bandOrdering is the --flow-control-ordering the bands ask for ("" when
// none names one), or an error naming the first that differs from the
// others. Upstream makes the band of a priority priorityBands does not list
// from defaultPriorityBand, which is fcfs-ordering-policy when the section
// leaves it out; hasDefault says the section has it.
func bandOrdering(bands []bandBound, hasDefault bool) (string, error) {
	if !hasDefault && len(bands) > 0 {
		bands = append([]bandBound{{key: "flowControl.defaultPriorityBand", ordering: fcfsOrdering}}, bands...)
	}
	ordering := ""
	for _, b := range bands {
		if b.ordering != bands[0].ordering {
			return "", fmt.Errorf("line %d: %s.orderingPolicyRef %s differs from %s.orderingPolicyRef %s: inferpick orders the waiting requests of every priority alike "+
				"(--flow-control-ordering); give the bands one orderingPolicyRef (a band without one is %s, and so is a defaultPriorityBand left out, "+
				"from which upstream makes the bands of the priorities priorityBands does not list)",
				b.orderLine, b.key, b.ordering, bands[0].key, bands[0].ordering, fcfsOrdering)
		}
		if b.orderingSet {
			ordering = orderings[b.ordering]
		}
	}
	return ordering, nil
}

// warnFairness warns when upstream would serve a band's flows otherwise
// than the queue does: its global-strict-fairness-policy, the default,
// serves the band's best head across all flows, by the band's ordering,
// where the queue serves the flows in turn. Under first come, first served
// only a band naming it warns (the difference is upstream's default and
// inferpick's documented one); under deadline order a band leaving it out
// warns too, as a config moved to that order meets the difference there.
func (u *upstream) warnFairness(b bandBound) {
	if b.fairness != globalStrict {
		return
	}
	switch {
	case b.ordering == sloDeadline && b.fairnessSet:
		u.warn(b.key + ".fairnessPolicyRef " + globalStrict + " has no effect: " + deadlineFairness)
	case b.ordering == sloDeadline:
		u.warn(b.key + " names no fairnessPolicyRef, so upstream's is " + globalStrict + ", which has no effect: " + deadlineFairness +
			"; name " + roundRobin + " to say what the queue does")
	case b.fairnessSet:
		u.warn(b.key + ".fairnessPolicyRef " + globalStrict + " has no effect: " + flowControlPolicy +
			", each flow first come, first served (as " + roundRobin + "), not oldest request first across flows")
	}
}

// deadlineFairness is what the queue does among the flows of a band of
// slo-deadline-ordering-policy, against upstream's global strict fairness.
const deadlineFairness = "with " + sloDeadline + " " + flowControlPolicy +
	", each flow by earliest deadline (as " + roundRobin + "), not the earliest deadline across the band"

// bandBound is the request bound, the ordering and the fairness of one
// priority band of the section.
type bandBound struct {
	key      string
	line     int
	requests int // NoRequestBound when the band sets none, as upstream
	// ordering is the upstream ordering policy's type, fcfsOrdering when
	// the band names none, as upstream; orderingSet says it names one, at
	// orderLine.
	ordering    string
	orderingSet bool
	orderLine   int
	// fairness is the upstream fairness policy's type, globalStrict when
	// the band names none, as upstream; fairnessSet says it names one.
	fairness    string
	fairnessSet bool
}

func requestsText(n int) string {
	if n == NoRequestBound {
		return "(no bound)"
	}
	return strconv.Itoa(n)
}

// readBand reads one priority band (defaultPriorityBand or an entry of
// priorityBands).
func (u *upstream) readBand(key string, n *yaml.Node) (bandBound, error) {
	b := bandBound{key: key, line: n.Line, requests: NoRequestBound, ordering: fcfsOrdering, orderLine: n.Line, fairness: globalStrict}
	if n.Kind != yaml.MappingNode {
		return b, fmt.Errorf("line %d: %s must be a mapping", n.Line, key)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		var err error
		switch k.Value {
		case "priority":
			if _, err = strconv.Atoi(v.Value); err != nil {
				err = fmt.Errorf("line %d: %s.priority %q is not a whole number", v.Line, key, v.Value)
			}
		case "maxRequests":
			b.line = v.Line
			b.requests, err = readRequests(key+".maxRequests", v)
		case "maxBytes":
			if _, err = readQuantity(key+".maxBytes", v); err == nil {
				u.warn(fmt.Sprintf("%s.maxBytes has no effect: inferpick bounds the bytes of all waiting requests together (flowControl.maxBytes, --flow-control-max-bytes), not those of one priority", key))
			}
		case "orderingPolicyRef":
			err = u.checkFlowPolicy(v, key+".orderingPolicyRef", []string{fcfsOrdering, sloDeadline},
				"the flow-control queue serves each flow first come, first served ("+fcfsOrdering+") or by deadline ("+sloDeadline+")")
			b.ordering, b.orderingSet, b.orderLine = u.flowPolicyType(v), true, v.Line
		case "fairnessPolicyRef":
			// A global-strict fairness warns once the band's ordering is
			// known (warnFairness).
			err = u.checkFlowPolicy(v, key+".fairnessPolicyRef", []string{roundRobin, globalStrict},
				flowControlPolicy+" ("+roundRobin+"); remove it")
			b.fairness, b.fairnessSet = u.flowPolicyType(v), true
		default:
			err = fmt.Errorf("line %d: unknown %s field %q", k.Line, key, k.Value)
		}
		if err != nil {
			return b, err
		}
	}
	return b, nil
}

// checkFlowPolicy checks a reference to a flow-control policy: a plugin of
// plugins, or upstream's own instance of that name. ok are the policy
// types inferpick's queue stands for; any other is refused, saying
// instead.
func (u *upstream) checkFlowPolicy(ref *yaml.Node, key string, ok []string, instead string) error {
	if !slices.Contains(ok, u.flowPolicyType(ref)) {
		return fmt.Errorf("line %d: %s %q is not supported: %s", ref.Line, key, ref.Value, instead)
	}
	return nil
}

// flowPolicyType is the type of the flow-control policy ref names: a
// plugin's of plugins, or upstream's own instance of that name.
func (u *upstream) flowPolicyType(ref *yaml.Node) string {
	if p, declared := u.plugins[ref.Value]; declared {
		return p.typ
	}
	return ref.Value
}

// readQuantity reads a Kubernetes quantity ("1Gi", "500M", "100") that
// must not be negative.
func readQuantity(key string, v *yaml.Node) (int64, error) {
	q, err := resource.ParseQuantity(strings.TrimSpace(v.Value))
	if v.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: %s %q is not a quantity (such as 1Gi or 500)", v.Line, key, v.Value)
	}
	n, exact := q.AsInt64()
	if !exact {
		n = q.Value()
	}
	if n < 0 {
		return 0, fmt.Errorf("line %d: %s %q is negative", v.Line, key, v.Value)
	}
	return n, nil
}

// readRequests reads a request bound; 0, upstream's no bound, and values
// past NoRequestBound are NoRequestBound.
func readRequests(key string, v *yaml.Node) (int, error) {
	n, err := readQuantity(key, v)
	if err != nil {
		return 0, err
	}
	if n == 0 || n > NoRequestBound {
		return NoRequestBound, nil
	}
	return int(n), nil
}

// readTTL reads defaultRequestTTL, a Go duration; 0 is upstream's no bound.
func readTTL(v *yaml.Node) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(v.Value))
	if v.Kind != yaml.ScalarNode || err != nil {
		return 0, fmt.Errorf("line %d: flowControl.defaultRequestTTL %q is not a duration (such as 30s)", v.Line, v.Value)
	}
	if d < 0 {
		return 0, fmt.Errorf("line %d: flowControl.defaultRequestTTL %q is negative", v.Line, v.Value)
	}
	if d == 0 || d > NoWaitBound {
		return NoWaitBound, nil
	}
	return d, nil
}
