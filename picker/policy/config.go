package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/inferpick/inferpick/picker/portnum"
	"github.com/inferpick/inferpick/picker/session"
)

// Names of the policies Build knows.
const (
	CacheAware     = "cache-aware"
	LeastLoad      = "least-load"
	RoundRobin     = "round-robin"
	Random         = "random"
	PowerOfTwo     = "power-of-two"
	WeightedScorer = "weighted-scorer"
)

// Modes of the cache-aware policy.
const (
	// ModeCost picks the lowest estimated cost: load plus the prefill of the
	// part of the prompt the worker does not hold.
	ModeCost = "cost"
	// ModeThreshold picks the longest match above a threshold, spilling to
	// the least loaded worker when the match is short or its holder is
	// overloaded relative to the pool.
	ModeThreshold = "threshold"
)

// Config selects and tunes a policy. Zero fields take their defaults.
type Config struct {
	// Name is the policy: cache-aware (default), least-load, round-robin,
	// random, power-of-two or weighted-scorer.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`

	// A worker is saturated when its fresh metrics show at least
	// QueueThreshold waiting requests and a KV-cache usage of at least
	// KVCacheThreshold, or when MaxInFlight > 0 requests are in flight on it.
	QueueThreshold   int     `json:"queueThreshold,omitempty" yaml:"queueThreshold,omitempty"`
	KVCacheThreshold float64 `json:"kvCacheThreshold,omitempty" yaml:"kvCacheThreshold,omitempty"`
	MaxInFlight      int     `json:"maxInFlight,omitempty" yaml:"maxInFlight,omitempty"`

	// MetricsStaleness is how old scraped metrics may be and still be
	// trusted; about three scrape intervals.
	MetricsStaleness Duration `json:"metricsStaleness,omitempty" yaml:"metricsStaleness,omitempty"`

	// PrefillWeight is what one request in prefill counts for in a worker's
	// load, a request in decode counting 1.
	PrefillWeight float64 `json:"prefillWeight,omitempty" yaml:"prefillWeight,omitempty"`

	CacheAware     CacheAwareConfig     `json:"cacheAware,omitempty" yaml:"cacheAware,omitempty"`
	WeightedScorer WeightedScorerConfig `json:"weightedScorer,omitempty" yaml:"weightedScorer,omitempty"`
	Index          IndexConfig          `json:"index,omitempty" yaml:"index,omitempty"`

	// SessionAffinity, when set, keeps a client's session on one pod; nil
	// turns it off.
	SessionAffinity *SessionAffinityConfig `json:"sessionAffinity,omitempty" yaml:"sessionAffinity,omitempty"`

	// Disaggregation, when set, prefills a request whose prompt is long
	// enough on a pod of its own and decodes it on another (llm-d's
	// prefill/decode disaggregation); nil turns it off.
	Disaggregation *DisaggregationConfig `json:"disaggregation,omitempty" yaml:"disaggregation,omitempty"`

	// DataParallel, when set, sends each request to its pod's primary port
	// and names the data-parallel rank picked for it to the pod's sidecar
	// (llm-d's data-parallel profile handler); nil routes to each rank's
	// port directly.
	DataParallel *DataParallelConfig `json:"dataParallel,omitempty" yaml:"dataParallel,omitempty"`

	// ContextLength, when set, routes a request by its prompt's length
	// against the range each pod's label gives (contextlength.go); nil
	// turns it off.
	ContextLength *ContextLengthConfig `json:"contextLength,omitempty" yaml:"contextLength,omitempty"`

	// LabelFilters keep, of a request's candidates, the pods whose labels
	// every one of them selects (labels.go): llm-d's by-label and
	// by-label-selector filters. Under Disaggregation they apply to the
	// pick of the pod that decodes; the prefill pod's pick takes
	// Disaggregation.PrefillLabelFilters.
	LabelFilters []LabelFilter `json:"labelFilters,omitempty" yaml:"labelFilters,omitempty"`

	// SLO, when set, learns to predict each request's latency on each pod
	// and routes a request that states latency objectives to the pods
	// predicted to meet them (slo.go); nil turns it off.
	SLO *SLOConfig `json:"slo,omitempty" yaml:"slo,omitempty"`
}

// RoleLabel is the pod label that says which stages of a request a pod
// serves, as llm-d labels them: decode, prefill, prefill-decode (or both),
// encode, encode-prefill, encode-prefill-decode. A pod without it serves
// every stage.
const RoleLabel = "llm-d.ai/role"

// PrefillerHeader is the request header that names the pod (ip:port) the
// decode pod's sidecar sends the prefill to, as llm-d's routing sidecar
// reads it. The picker removes a client's.
const PrefillerHeader = "x-prefiller-host-port"

// EncodersHeader is the request header that names the pods (a
// comma-separated list of ip:port) the decode pod's sidecar sends a
// request's multimodal inputs to be encoded on before its prefill, as
// llm-d's routing sidecar reads it. The picker removes a client's.
const EncodersHeader = "x-encoder-hosts-ports"

// DisaggregationConfig splits prefill and decode across pods. A request is
// decoded on a pod that decodes (role label decode, prefill-decode, both,
// encode-prefill-decode, or none); when the part of its prompt that pod
// does not hold is at least MinUncachedTokens tokens (4 bytes of prompt
// counted as a token), a pod that prefills (role prefill, encode-prefill,
// prefill-decode, both, encode-prefill-decode) is picked too, and named to
// the decode pod's sidecar in PrefillerHeader.
type DisaggregationConfig struct {
	// MinUncachedTokens is the shortest uncached prompt, in tokens, that
	// is prefilled apart; 0 prefills every request apart.
	MinUncachedTokens int `json:"minUncachedTokens,omitempty" yaml:"minUncachedTokens,omitempty"`
	// PrefillLabelFilters keep, of the pods that prefill, those whose
	// labels every one of them selects, for the prefill pod's pick alone
	// (Config.LabelFilters are the decode pod's).
	PrefillLabelFilters []LabelFilter `json:"prefillLabelFilters,omitempty" yaml:"prefillLabelFilters,omitempty"`
	// PrefillPods is which pods the prefill pod is picked among, before
	// PrefillLabelFilters: role (default), the pods whose llm-d.ai/role
	// label says they prefill; all, every pod of the pool but the decode
	// pod, as llm-d's prefill profile without its prefill-filter, for pods
	// told apart by labels of their own; none, no pod, so that every
	// request is prefilled on its decode pod and only the encode stage
	// (Encode) is split apart.
	PrefillPods string `json:"prefillPods,omitempty" yaml:"prefillPods,omitempty"`
	// Encode is which requests have their multimodal inputs encoded on
	// a pod of their own, as llm-d's encode stage: "" none; multimodal, a
	// chat completion with an image_url or input_audio part, on the encode
	// pod (role label encode, encode-prefill, encode-prefill-decode) that
	// EncodeLabelFilters keep with room that has the fewest requests in
	// flight, named to the decode pod's sidecar in EncodersHeader. With no
	// encode pod with room the request goes without the encode stage.
	Encode string `json:"encode,omitempty" yaml:"encode,omitempty"`
	// EncodeLabelFilters keep, of the encode pods, those whose labels
	// every one of them selects, for the encode pod's pick alone.
	EncodeLabelFilters []LabelFilter `json:"encodeLabelFilters,omitempty" yaml:"encodeLabelFilters,omitempty"`
}

// DataParallelHeader is the request header that names the data-parallel
// rank (pod ip:rank port) the pod's sidecar, listening on the primary
// port, sends the request to, as llm-d's routing sidecar reads it. The
// picker removes a client's.
const DataParallelHeader = "x-data-parallel-host-port"

// DataParallelConfig routes through the sidecar of pods that serve one
// data-parallel rank per target port. The pick is still of a (pod, rank
// port) worker, whose load it holds; the gateway is sent to the pod's
// PrimaryPort, and the rank's address goes in DataParallelHeader. The
// destination then lists no fallbacks: the header names one rank, which
// another pod's sidecar would refuse.
type DataParallelConfig struct {
	// PrimaryPort is the port of each pod the sidecar listens on, 1 to
	// 65535.
	PrimaryPort int `json:"primaryPort" yaml:"primaryPort"`
}

// What DisaggregationConfig.PrefillPods names.
const (
	PrefillPodsRole = "role"
	PrefillPodsAll  = "all"
	PrefillPodsNone = "none"
)

// EncodeMultimodal is DisaggregationConfig.Encode's one value: chat
// completions with media parts are encoded apart.
const EncodeMultimodal = "multimodal"

// Modes of session affinity.
const (
	// SessionPin sends a request whose token names a pod among its
	// candidates (or whose id hashes to one) to that pod, unless the pod
	// is saturated for it.
	SessionPin = "pin"
	// SessionPrefer adds weightedScorer.sessionWeight to the score of the
	// token's pod, or the id's (weighted-scorer only): a preference other
	// scores may outweigh.
	SessionPrefer = "prefer"
)

// What the session header carries (SessionAffinityConfig.Key).
const (
	// SessionToken is the token naming the pod (package session).
	SessionToken = "token"
	// SessionID is the client's opaque session id, placed on a pod by
	// rendezvous hashing over the pods (session.ID).
	SessionID = "id"
)

// SessionAffinityConfig keeps a session on one pod. With key token, the
// response names the pod that served it in Header, as the base64 of its
// namespace/name, when the request's token named another (or none); the
// client sends the token back on its next request. With key id, the client
// sends its own session id, which every replica hashes to the same pod;
// nothing is written on the response. Either way nothing is kept per
// session.
type SessionAffinityConfig struct {
	// Header carries the session: x-session-token by default with key
	// token, x-session-id with key id. Header names are matched in lower
	// case.
	Header string `json:"header,omitempty" yaml:"header,omitempty"`
	// Key is what the header carries: token (default) or id.
	Key string `json:"key,omitempty" yaml:"key,omitempty"`
	// Mode is pin (default) or prefer.
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
}

// CacheAwareConfig tunes the cache-aware policy.
type CacheAwareConfig struct {
	// Mode is cost (default) or threshold.
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty"`
	// BlocksPerLoad (cost mode) is how many uncached prompt blocks weigh as
	// much as one unit of load.
	BlocksPerLoad float64 `json:"blocksPerLoad,omitempty" yaml:"blocksPerLoad,omitempty"`
	// MatchThreshold (threshold mode) is the share of the prompt's blocks a
	// match must cover for cache affinity to win over balance.
	MatchThreshold float64 `json:"matchThreshold,omitempty" yaml:"matchThreshold,omitempty"`
	// A worker is overloaded when its load exceeds both the pool's mean ×
	// BalanceRel and the mean + BalanceAbs (threshold mode).
	BalanceRel float64 `json:"balanceRel,omitempty" yaml:"balanceRel,omitempty"`
	BalanceAbs float64 `json:"balanceAbs,omitempty" yaml:"balanceAbs,omitempty"`
	// AdapterLoadCost (cost mode) is what loading a LoRA adapter on a
	// worker weighs, in units of load: the adapter's load time over a
	// request's service time. A worker where the adapter is running,
	// waiting or was just sent costs nothing more; one with a free adapter
	// slot costs AdapterLoadCost; one with every slot taken twice that.
	AdapterLoadCost float64 `json:"adapterLoadCost,omitempty" yaml:"adapterLoadCost,omitempty"`
	// HomeBlocks (cost mode) is how many leading prompt blocks name the
	// prefix whose home every replica agrees on (home.go); negative turns
	// home hashing off.
	HomeBlocks int `json:"homeBlocks,omitempty" yaml:"homeBlocks,omitempty"`
	// HomeEpsilon is the load slack of the home: a worker holding more than
	// (1+HomeEpsilon) × the mean overflows to the next in the prefix's order.
	HomeEpsilon float64 `json:"homeEpsilon,omitempty" yaml:"homeEpsilon,omitempty"`
	// Replicas (cost mode) is how many pickers route to the pool, as
	// deployed; 0 when unknown. One routes as a lone picker from the first
	// request; more, or unknown, presume peers until the servers' figures
	// show none (home.go).
	Replicas int `json:"replicas,omitempty" yaml:"replicas,omitempty"`
}

// WeightedScorerConfig holds the weights of the weighted scorer. With no
// weight set but SessionWeight and ContextLengthWeight, the queue, KV-cache
// and prefix weights are upstream's 2, 2 and 3 (unless NoDefaultWeights);
// with any other weight set (LoRAWeight or a load score's too), every
// weight not set is 0.
type WeightedScorerConfig struct {
	QueueWeight  float64 `json:"queueWeight,omitempty" yaml:"queueWeight,omitempty"`
	KVWeight     float64 `json:"kvCacheWeight,omitempty" yaml:"kvCacheWeight,omitempty"`
	PrefixWeight float64 `json:"prefixWeight,omitempty" yaml:"prefixWeight,omitempty"`
	// LoRAWeight weighs the LoRA affinity score: 1 where the requested
	// adapter is loaded (or none is involved), 0.5 where a slot is free, 0
	// where every slot is taken. 0 by default, as upstream's default
	// profile has no LoRA scorer.
	LoRAWeight float64 `json:"loraAffinityWeight,omitempty" yaml:"loraAffinityWeight,omitempty"`
	// SessionWeight weighs the session score, with sessionAffinity mode
	// prefer: 1 for the pod the request's session token names (or its id
	// hashes to), 0 for the others (upstream's session-affinity-scorer).
	SessionWeight float64 `json:"sessionWeight,omitempty" yaml:"sessionWeight,omitempty"`
	// ContextLengthWeight weighs the context-length score of the
	// contextLength block (contextlength.go); 0 by default.
	ContextLengthWeight float64 `json:"contextLengthWeight,omitempty" yaml:"contextLengthWeight,omitempty"`
	// NoDefaultWeights keeps the 2/2/3 weights from being added when no
	// weight is set but SessionWeight and ContextLengthWeight: the scorer
	// weighs those alone. A profile translated from an upstream config
	// file sets it there, as upstream weighs only the scorers a profile
	// lists.
	NoDefaultWeights bool `json:"noDefaultWeights,omitempty" yaml:"noDefaultWeights,omitempty"`

	// The load scores of llm-d's and upstream's other scorers (loadscores.go).
	LoadScores `yaml:",inline"`
}

// LoadScores are the weights, and what they need, of the weighted scorer's
// scores of load beside the queue and KV-cache scores, each 0 by default.
type LoadScores struct {
	// ActiveRequestWeight weighs the active-request score (llm-d's
	// active-request-scorer) of the requests this picker has in flight on
	// the pod, counted by their guards: 1 for a pod holding at most
	// ActiveRequest.IdleThreshold, else ActiveRequest.MaxBusyScore × (the
	// most any candidate holds − its own) / that most.
	ActiveRequestWeight float64            `json:"activeRequestWeight,omitempty" yaml:"activeRequestWeight,omitempty"`
	ActiveRequest       ActiveRequestScore `json:"activeRequest,omitempty" yaml:"activeRequest,omitempty"`
	// RunningWeight weighs the running score (upstream's
	// running-requests-size-scorer) of the pod's scraped running requests:
	// (most − its own) / (most − fewest) over the candidates, 1 for all
	// when they run alike.
	RunningWeight float64 `json:"runningRequestsWeight,omitempty" yaml:"runningRequestsWeight,omitempty"`
	// LoadAwareWeight weighs the load-aware score (llm-d's
	// load-aware-scorer) of the pod's waiting queue: 0.5 when empty, else
	// 0.5 × (1 − waiting/LoadAwareThreshold), 0 from the threshold on.
	LoadAwareWeight    float64 `json:"loadAwareWeight,omitempty" yaml:"loadAwareWeight,omitempty"`
	LoadAwareThreshold int     `json:"loadAwareThreshold,omitempty" yaml:"loadAwareThreshold,omitempty"`
	// NoHitLRUWeight weighs the no-hit score (llm-d's no-hit-lru-scorer):
	// for a prompt no candidate holds a block of, 1 − r/(n−1) for a pod
	// whose last such prompt came before those of r of the n candidates
	// (1 for every pod never sent one); 0.5 for all when some candidate
	// holds part of it. With PrefixWeight 0 every prompt counts as held
	// by none, as upstream's scorer finds no match without a prefix
	// scorer.
	NoHitLRUWeight float64 `json:"noHitLRUWeight,omitempty" yaml:"noHitLRUWeight,omitempty"`
}

// ActiveRequestScore tunes the active-request score, as llm-d's parameters
// of the same names.
type ActiveRequestScore struct {
	// IdleThreshold is the most requests in flight of a pod that scores 1.
	IdleThreshold int `json:"idleThreshold,omitempty" yaml:"idleThreshold,omitempty"`
	// MaxBusyScore, in [0,1], scales the score of a busy pod, one holding
	// more than IdleThreshold: 0, the default as llm-d's configurations
	// get it, scores every busy pod 0; 1 scores them from nearly 1 for
	// the least busy down to 0 for the busiest.
	MaxBusyScore float64 `json:"maxBusyScore,omitempty" yaml:"maxBusyScore,omitempty"`
}

// TakesDefaults reports whether Config.Default gives ws the queue, KV-cache
// and prefix weights 2, 2 and 3: no weight is set but SessionWeight and
// ContextLengthWeight, and NoDefaultWeights is not.
func (ws WeightedScorerConfig) TakesDefaults() bool {
	return (WeightedScorerConfig{SessionWeight: ws.SessionWeight, ContextLengthWeight: ws.ContextLengthWeight, LoadScores: ws.LoadScores}) == ws && !ws.weighted()
}

// weighs reports whether any of ws's weights is above 0: without one,
// every pod scores 0 and each pick is a tie.
func (ws WeightedScorerConfig) weighs() bool {
	return ws.QueueWeight > 0 || ws.KVWeight > 0 || ws.PrefixWeight > 0 || ws.LoRAWeight > 0 ||
		ws.SessionWeight > 0 || ws.ContextLengthWeight > 0 || ws.weighted()
}

// weighted reports whether any weight of the load scores is set.
func (l LoadScores) weighted() bool {
	return l.ActiveRequestWeight != 0 || l.RunningWeight != 0 || l.LoadAwareWeight != 0 || l.NoHitLRUWeight != 0
}

// IndexConfig tunes the prefix index of the policies that keep one.
type IndexConfig struct {
	// DefaultCapacityBlocks bounds the blocks of a worker whose KV capacity
	// is not known yet.
	DefaultCapacityBlocks int `json:"defaultCapacityBlocks,omitempty" yaml:"defaultCapacityBlocks,omitempty"`
	// MaxHolders is how many workers one block remembers.
	MaxHolders int `json:"maxHolders,omitempty" yaml:"maxHolders,omitempty"`
	// MaxBlocks is the hard cap on the index's (block, worker) entries,
	// whatever KV capacity the model servers report; each worker holds at
	// most its fair share of it.
	MaxBlocks int `json:"maxBlocks,omitempty" yaml:"maxBlocks,omitempty"`
}

// Defaults.
const (
	DefaultQueueThreshold   = 5
	DefaultKVCacheThreshold = 0.8
	DefaultMetricsStaleness = 2 * time.Second // the same as --metrics-staleness-threshold
	DefaultPrefillWeight    = 2
	DefaultBlocksPerLoad    = 8
	DefaultMatchThreshold   = 0.5
	DefaultBalanceRel       = 1.5
	DefaultBalanceAbs       = 4
	DefaultAdapterLoadCost  = 4
	DefaultHomeBlocks       = 4
	DefaultHomeEpsilon      = 0.25
	// DefaultLoadAwareThreshold is llm-d's load-aware-scorer's.
	DefaultLoadAwareThreshold = 128
)

// Default returns c with every zero field set to its default.
func (c Config) Default() Config {
	setDefault(&c.Name, CacheAware)
	setDefault(&c.QueueThreshold, DefaultQueueThreshold)
	setDefault(&c.KVCacheThreshold, DefaultKVCacheThreshold)
	setDefault(&c.MetricsStaleness.Duration, DefaultMetricsStaleness)
	setDefault(&c.PrefillWeight, DefaultPrefillWeight)
	ca := &c.CacheAware
	setDefault(&ca.Mode, ModeCost)
	setDefault(&ca.BlocksPerLoad, DefaultBlocksPerLoad)
	setDefault(&ca.MatchThreshold, DefaultMatchThreshold)
	setDefault(&ca.BalanceRel, DefaultBalanceRel)
	setDefault(&ca.BalanceAbs, DefaultBalanceAbs)
	setDefault(&ca.AdapterLoadCost, DefaultAdapterLoadCost)
	setDefault(&ca.HomeBlocks, DefaultHomeBlocks)
	setDefault(&ca.HomeEpsilon, DefaultHomeEpsilon)
	ws := &c.WeightedScorer
	if ws.TakesDefaults() {
		ws.QueueWeight, ws.KVWeight, ws.PrefixWeight = 2, 2, 3
	}
	if ws.LoadAwareWeight > 0 {
		setDefault(&ws.LoadAwareThreshold, DefaultLoadAwareThreshold)
	}
	c.ContextLength = defaultContextLength(c.ContextLength)
	c.SLO = defaultSLO(c.SLO)
	if c.SessionAffinity != nil {
		sa := *c.SessionAffinity
		sa.Header = strings.ToLower(strings.TrimSpace(sa.Header))
		setDefault(&sa.Key, SessionToken)
		if sa.Key == SessionID {
			setDefault(&sa.Header, session.DefaultIDHeader)
		}
		setDefault(&sa.Header, session.DefaultHeader)
		setDefault(&sa.Mode, SessionPin)
		c.SessionAffinity = &sa
	}
	return c
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Validate reports every bad field of a defaulted config, each error naming
// the field by its JSON path.
func (c Config) Validate() error {
	var errs []error
	bad := func(field string, v any, want string) {
		errs = append(errs, fmt.Errorf("%s: %v is invalid: must be %s", field, v, want))
	}
	switch c.Name {
	case CacheAware, LeastLoad, RoundRobin, Random, PowerOfTwo, WeightedScorer:
	default:
		bad("name", strconv.Quote(c.Name), "one of cache-aware, least-load, round-robin, random, power-of-two, weighted-scorer")
	}
	if c.QueueThreshold < 0 {
		bad("queueThreshold", c.QueueThreshold, "≥ 0")
	}
	if !within(c.KVCacheThreshold, 0, 1) {
		bad("kvCacheThreshold", c.KVCacheThreshold, "in [0,1]")
	}
	if c.MaxInFlight < 0 {
		bad("maxInFlight", c.MaxInFlight, "≥ 0")
	}
	if d := c.MetricsStaleness.Duration; d < 0 {
		bad("metricsStaleness", c.MetricsStaleness, "≥ 0")
	} else if d > 0 && d < minMetricsStaleness {
		bad("metricsStaleness", c.MetricsStaleness, fmt.Sprintf("at least %v (a bare number is nanoseconds: write a unit, as in \"2s\")", minMetricsStaleness))
	}
	if !atLeast(c.PrefillWeight, 0) {
		bad("prefillWeight", c.PrefillWeight, "a finite number ≥ 0")
	}
	ca := c.CacheAware
	if ca.Mode != ModeCost && ca.Mode != ModeThreshold {
		bad("cacheAware.mode", strconv.Quote(ca.Mode), "cost or threshold")
	}
	if !(ca.BlocksPerLoad > 0) || math.IsInf(ca.BlocksPerLoad, 1) {
		bad("cacheAware.blocksPerLoad", ca.BlocksPerLoad, "a finite number > 0")
	}
	if !within(ca.MatchThreshold, 0, 1) {
		bad("cacheAware.matchThreshold", ca.MatchThreshold, "in [0,1]")
	}
	if !atLeast(ca.BalanceRel, 1) {
		bad("cacheAware.balanceRel", ca.BalanceRel, "a finite number ≥ 1")
	}
	if !atLeast(ca.BalanceAbs, 0) {
		bad("cacheAware.balanceAbs", ca.BalanceAbs, "a finite number ≥ 0")
	}
	if !atLeast(ca.AdapterLoadCost, 0) {
		bad("cacheAware.adapterLoadCost", ca.AdapterLoadCost, "a finite number ≥ 0")
	}
	if ca.Replicas < 0 {
		bad("cacheAware.replicas", ca.Replicas, "≥ 0")
	}
	if !atLeast(ca.HomeEpsilon, 0) {
		bad("cacheAware.homeEpsilon", ca.HomeEpsilon, "a finite number ≥ 0")
	}
	ws := c.WeightedScorer
	for field, w := range map[string]float64{
		"weightedScorer.queueWeight":        ws.QueueWeight,
		"weightedScorer.kvCacheWeight":      ws.KVWeight,
		"weightedScorer.prefixWeight":       ws.PrefixWeight,
		"weightedScorer.loraAffinityWeight": ws.LoRAWeight,
		"weightedScorer.sessionWeight":      ws.SessionWeight,
	} {
		if !atLeast(w, 0) {
			bad(field, w, "a finite number ≥ 0")
		}
	}
	errs = append(errs, ws.validate()...)
	if c.Name == WeightedScorer && ws.NoDefaultWeights && !ws.weighs() {
		errs = append(errs, errors.New("weightedScorer.noDefaultWeights: true with no weight above 0 scores every pod 0, so each pick is a tie: set a weight, or drop noDefaultWeights to weigh queue, KV cache and prefix 2, 2 and 3"))
	}
	errs = append(errs, c.validateSession()...)
	errs = append(errs, c.validateContextLength()...)
	errs = append(errs, c.validateSLO()...)
	if d := c.Disaggregation; d != nil && d.MinUncachedTokens < 0 {
		bad("disaggregation.minUncachedTokens", d.MinUncachedTokens, "≥ 0")
	}
	if d := c.DataParallel; d != nil && !portnum.Valid(d.PrimaryPort) {
		bad("dataParallel.primaryPort", d.PrimaryPort, "a port "+portnum.Range)
	}
	errs = append(errs, validateLabelFilters("labelFilters", c.LabelFilters)...)
	if d := c.Disaggregation; d != nil {
		errs = append(errs, validateLabelFilters("disaggregation.prefillLabelFilters", d.PrefillLabelFilters)...)
		errs = append(errs, validateLabelFilters("disaggregation.encodeLabelFilters", d.EncodeLabelFilters)...)
		if d.PrefillPods != "" && d.PrefillPods != PrefillPodsRole && d.PrefillPods != PrefillPodsAll && d.PrefillPods != PrefillPodsNone {
			bad("disaggregation.prefillPods", strconv.Quote(d.PrefillPods), "role, all or none")
		}
		if d.Encode != "" && d.Encode != EncodeMultimodal {
			bad("disaggregation.encode", strconv.Quote(d.Encode), `"" or multimodal`)
		}
	}
	if c.Index.DefaultCapacityBlocks < 0 {
		bad("index.defaultCapacityBlocks", c.Index.DefaultCapacityBlocks, "≥ 0")
	}
	if c.Index.MaxHolders < 0 {
		bad("index.maxHolders", c.Index.MaxHolders, "≥ 0")
	}
	if c.Index.MaxBlocks < 0 {
		bad("index.maxBlocks", c.Index.MaxBlocks, "≥ 0")
	}
	return errors.Join(errs...)
}

// validateSession checks the session affinity block against the weighted
// scorer's session weight, which only mode prefer reads.
func (c Config) validateSession() []error {
	sa, w := c.SessionAffinity, c.WeightedScorer.SessionWeight
	if sa == nil {
		if w > 0 {
			return []error{fmt.Errorf("weightedScorer.sessionWeight: %v has no effect without sessionAffinity: {mode: prefer}", w)}
		}
		return nil
	}
	var errs []error
	if !session.ValidHeader(sa.Header) {
		errs = append(errs, fmt.Errorf("sessionAffinity.header: %q is invalid: must be an HTTP header name (letters, digits and !#$%%&'*+-.^_`|~)", sa.Header))
	}
	if sa.Key != SessionToken && sa.Key != SessionID {
		errs = append(errs, fmt.Errorf("sessionAffinity.key: %q is invalid: must be token or id", sa.Key))
	}
	switch sa.Mode {
	case SessionPin:
		if w > 0 {
			errs = append(errs, fmt.Errorf("weightedScorer.sessionWeight: %v has no effect with sessionAffinity.mode pin: use mode prefer, or drop the weight", w))
		}
	case SessionPrefer:
		if c.Name != WeightedScorer {
			errs = append(errs, fmt.Errorf("sessionAffinity.mode: prefer is invalid with policy %s: it weighs weightedScorer.sessionWeight, so it needs name weighted-scorer; use mode pin", c.Name))
		} else if !(w > 0) {
			errs = append(errs, errors.New("weightedScorer.sessionWeight: must be > 0 with sessionAffinity.mode prefer"))
		}
	default:
		errs = append(errs, fmt.Errorf("sessionAffinity.mode: %q is invalid: must be pin or prefer", sa.Mode))
	}
	return errs
}

// minMetricsStaleness is the shortest metricsStaleness accepted. Anything
// shorter marks every scrape stale on arrival, turning the saturation
// check and the scraped load off without a word; it is almost always a
// bare number ("2") read as nanoseconds.
const minMetricsStaleness = time.Millisecond

// atLeast reports whether v is finite and at least lo. The float checks go
// through it or within because NaN fails every comparison, so a check
// written as "v < lo is bad" lets NaN through (YAML's .nan, or "NaN" in an
// upstream parameter), and a NaN weight or cost makes every candidate
// compare equal and the first one take all traffic.
func atLeast(v, lo float64) bool { return v >= lo && v <= math.MaxFloat64 }

// within reports whether v is in [lo,hi]; NaN is not.
func within(v, lo, hi float64) bool { return v >= lo && v <= hi }

// Duration is a time.Duration written as a Go duration string ("1.5s") in
// JSON; a bare number is read as nanoseconds.
type Duration struct{ time.Duration }

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string or a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("duration %s: want a string like \"1s\" or nanoseconds", b)
		}
		d.Duration = time.Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = v
	return nil
}

// UnmarshalText reads a duration string, for YAML and flag decoders; a
// bare integer is nanoseconds, as in JSON.
func (d *Duration) UnmarshalText(b []byte) error {
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		d.Duration = time.Duration(n)
		return nil
	}
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration: %w", err)
	}
	d.Duration = v
	return nil
}

// MarshalText writes the duration as a string.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }
