package scrape

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrNoMetrics is returned by Parse when the body holds none of the series
// it looks for: the page is not a model server's, or is garbage.
var ErrNoMetrics = errors.New("no model-server metrics in body")

// Report is what one /metrics page says about a worker, read through a
// Schema; each value comes from the first of its series (Names) present on
// the page. Zero values mean "not reported".
type Report struct {
	// Waiting is the number of queued requests (vllm:num_requests_waiting
	// by default), summed over the samples.
	Waiting int
	// Running is the number of requests being processed
	// (vllm:num_requests_running by default), summed over the samples.
	Running int
	// KVUsage is the KV-cache usage in [0,1] (vllm:kv_cache_usage_perc by
	// default), the largest over the samples.
	KVUsage float64
	// BlockSize and NumGPUBlocks are the KV-cache block size in tokens and
	// the number of blocks: labels of an info gauge such as
	// vllm:cache_config_info, or gauges of their own (largest over the
	// samples).
	BlockSize    int
	NumGPUBlocks int
	// LoRA is read from vllm:lora_requests_info; nil when absent.
	LoRA *LoRAInfo
	// Models is the sorted set of model_name label values on the series
	// read: the served model a vLLM or SGLang server labels its series
	// with. Nil when no series carries the label.
	Models []string
	// Engines are the data-parallel engines the server fronts, bit e for
	// engine e: the values (below 64) of the engine label vLLM puts on each
	// engine's running-requests series; 0 when the series has no such label.
	Engines uint64
	// Counters are the cumulative counters the cost model calibrates
	// itself from.
	Counters Counters
	// Malformed counts the sample lines that could not be read and were
	// skipped. Only lines of the series read are read in full; other lines
	// are checked no further than their name.
	Malformed int
}

// Counters are cumulative model-server counters, each summed over its
// samples; 0 means not reported (or nothing counted yet). Consumers use
// differences between two scrapes, so a counter reset shows as a negative
// difference.
type Counters struct {
	PromptTokens  float64 // vllm:prompt_tokens_total
	PrefixQueries float64 // vllm:prefix_cache_queries_total, in tokens
	PrefixHits    float64 // vllm:prefix_cache_hits_total, in tokens
	TierHits      float64 // vllm:external_prefix_cache_hits_total, in tokens
	// PrefillSeconds and Prefills are the sum and count of
	// vllm:request_prefill_time_seconds.
	PrefillSeconds, Prefills float64
	// DecodeSeconds and DecodeTokens are the sum and count of
	// vllm:inter_token_latency_seconds (vllm:time_per_output_token_seconds
	// before it).
	DecodeSeconds, DecodeTokens float64
}

// LoRAInfo is the adapter state a vLLM server reports in
// vllm:lora_requests_info. vLLM keeps one series per label combination it
// has seen, valued with the time of its last update, so the series with the
// largest value is the current one. A server of several data-parallel
// engines that labels the series with the engine (engine="0", ...) has a
// current series per engine: the server's state is then the union of the
// engines' adapters, and MaxLoRA their slots together, less the slots an
// adapter in use on several engines takes beyond its first.
type LoRAInfo struct {
	MaxLoRA int      // max_lora: adapters a batch may hold
	Running []string // running_lora_adapters
	Waiting []string // waiting_lora_adapters
}

// Parse reads a Prometheus text exposition body for the names of the Auto
// preset. Lines end in LF or CRLF; the last may lack its end. It never
// fails on a malformed line (it skips and counts it) and returns
// ErrNoMetrics when none of the series it reads is present.
func Parse(body []byte) (Report, error) { return defaultSchema.Parse(body) }

// Parse reads a Prometheus text exposition body for the schema's names, as
// the package's Parse does.
func (s *Schema) Parse(body []byte) (Report, error) { return s.parse(body, nil) }

// parse is Parse for a worker whose previous report named prevModels: when
// the body names the same models, the result shares prevModels instead of
// allocating them again.
func (s *Schema) parse(body []byte, prevModels []string) (Report, error) {
	a := accumulator{models: modelSet{prev: prevModels}}
	var scratch [maxName]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		a.line(s, line, &scratch)
	}
	return a.report(s)
}

// accumulator folds the samples of one body, a slot per series read.
type accumulator struct {
	seen      [maxTargets]bool
	val       [maxTargets]float64 // request gauges: sum of non-NaN values; others: largest value, at least 0
	blockSize [maxTargets]int     // cache info
	numBlocks [maxTargets]int     // cache info
	loras     []engineLoRA        // by engine, in the order first seen
	models    modelSet
	engines   uint64 // bit e: a running-requests sample of engine e
	malformed int
}

func (a *accumulator) line(s *Schema, line []byte, scratch *[maxName]byte) {
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	i := 0
	for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
		i++
	}
	if i == len(line) || line[i] == '#' {
		return
	}
	line = line[i:]
	// The series of a plain name, found before the rest is read, are those
	// of the sample's name.
	var ts []target
	switch first := line[0]; {
	case s.first[first]:
		// Possibly ours: look at the whole name before reading further.
		c := cursor{b: line}
		name, ok := c.name(false, scratch)
		if !ok {
			a.malformed++
			return
		}
		if ts = s.targets(name); ts == nil {
			return
		}
	case first == '{' || first == '"':
	case isNameStart(first, false):
		return // another metric
	default:
		a.malformed++
		return
	}
	smp, ok := parseSample(line, scratch)
	if !ok {
		a.malformed++
		return
	}
	if ts == nil {
		ts = s.targets(smp.name)
	}
	for i := range ts {
		if matches(smp.labels, ts[i].match) {
			a.add(&ts[i], &smp)
		}
	}
}

func (a *accumulator) add(t *target, smp *sample) {
	a.seen[t.slot] = true
	if len(smp.labels) > 0 && t.field != fieldCacheInfo {
		it := labelIter{c: cursor{b: smp.labels}}
		a.sampleLabels(&it, t.field == fieldRunning)
	}
	v := smp.value
	switch t.field {
	case fieldWaiting, fieldRunning:
		if !math.IsNaN(v) {
			a.val[t.slot] += v
		}
	case fieldPromptTokens, fieldPrefixQueries, fieldPrefixHits, fieldTierHits, fieldPrefillSum, fieldPrefillCount, fieldDecodeSum, fieldDecodeCount:
		if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
			a.val[t.slot] += v
		}
	case fieldKVUsage, fieldBlockSize, fieldNumBlocks:
		if v > a.val[t.slot] {
			a.val[t.slot] = v
		}
	case fieldCacheInfo:
		it := labelIter{c: cursor{b: smp.labels}}
		a.cacheConfig(t, &it)
	case fieldLoRA:
		if !math.IsNaN(v) {
			a.loraSample(smp.labels, v)
		}
	}
}

// maxLoRAEngines bounds the engines whose LoRA state a page is read for
// (the series of further engines are skipped), so that a page of absurd
// labels costs no more than that many comparisons a line.
const maxLoRAEngines = 64

// engineLoRA is the newest vllm:lora_requests_info series of one engine.
type engineLoRA struct {
	engine string // the engine label; empty when the series has none
	at     float64
	info   *LoRAInfo
}

// loraSample keeps a series of vllm:lora_requests_info valued at when it
// is its engine's newest so far.
func (a *accumulator) loraSample(labels []byte, at float64) {
	engine := ""
	it := labelIter{c: cursor{b: labels}}
	for {
		l, ok := it.next()
		if !ok {
			break
		}
		if l.hasValue && string(l.key) == "engine" {
			engine = labelValue(l)
			break
		}
	}
	i := slices.IndexFunc(a.loras, func(e engineLoRA) bool { return e.engine == engine })
	if i >= 0 && at < a.loras[i].at || i < 0 && len(a.loras) == maxLoRAEngines {
		return
	}
	it = labelIter{c: cursor{b: labels}}
	e := engineLoRA{engine: engine, at: at, info: loraInfo(&it)}
	if i < 0 {
		a.loras = append(a.loras, e)
	} else {
		a.loras[i] = e
	}
}

// sampleLabels adds the model_name label of one sample to the set, and with
// engines its engine label to the engines seen.
func (a *accumulator) sampleLabels(it *labelIter, engines bool) {
	for {
		l, ok := it.next()
		if !ok {
			return
		}
		switch {
		case !l.hasValue:
		case string(l.key) == "model_name":
			a.models.add(l)
		case engines && string(l.key) == "engine":
			if e := labelInt(l); e < 64 && (e > 0 || string(l.value) == "0") {
				a.engines |= 1 << e
			}
		}
	}
}

// cacheConfig takes the block size and count from the labels of one
// sample of an info gauge such as vllm:cache_config_info.
func (a *accumulator) cacheConfig(t *target, it *labelIter) {
	for {
		l, ok := it.next()
		if !ok {
			return
		}
		switch string(l.key) {
		case t.blockSizeLabel:
			a.blockSize[t.slot] = max(a.blockSize[t.slot], labelInt(l))
		case t.numBlocksLabel:
			a.numBlocks[t.slot] = max(a.numBlocks[t.slot], labelInt(l))
		}
	}
}

// mergeLoRA is the server's adapter state from its engines' own: the
// adapters in use on any engine, and as max_lora the engines' slots
// together less those an adapter takes on more than one engine, so that
// the server counts as full exactly when its engines' slots are all taken
// (at least 1 when any engine has a slot).
func mergeLoRA(engines []engineLoRA) *LoRAInfo {
	switch len(engines) {
	case 0:
		return nil
	case 1:
		return engines[0].info
	}
	out := &LoRAInfo{}
	slots, taken := 0, 0
	for _, e := range engines {
		slots += e.info.MaxLoRA
		taken += countDistinct(e.info)
		out.Running = union(out.Running, e.info.Running)
		out.Waiting = union(out.Waiting, e.info.Waiting)
	}
	if slots > 0 {
		out.MaxLoRA = max(1, slots-(taken-countDistinct(out)))
	}
	return out
}

// union adds to set the names of add it lacks, in order.
func union(set, add []string) []string {
	for _, name := range add {
		if !slices.Contains(set, name) {
			set = append(set, name)
		}
	}
	return set
}

func loraInfo(it *labelIter) *LoRAInfo {
	info := &LoRAInfo{}
	for {
		l, ok := it.next()
		if !ok {
			return info
		}
		switch string(l.key) {
		case "max_lora":
			info.MaxLoRA = labelInt(l)
		case "running_lora_adapters":
			info.Running = adapterList(labelValue(l))
		case "waiting_lora_adapters":
			info.Waiting = adapterList(labelValue(l))
		}
	}
}

// labelInt reads a non-negative integer label; anything else ("None") is 0.
func labelInt(l label) int {
	if !l.hasValue || l.escaped {
		return 0
	}
	n, err := strconv.Atoi(string(l.value))
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// adapterList splits vLLM's comma-separated adapter names into a set: blank
// entries dropped, each name once, in the order first seen.
func adapterList(s string) []string {
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		if name = strings.TrimSpace(name); name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

func (a *accumulator) report(s *Schema) (Report, error) {
	r := Report{Malformed: a.malformed}
	found := false
	for _, seen := range a.seen {
		found = found || seen
	}
	if !found {
		return r, ErrNoMetrics
	}
	if slot, ok := a.first(s, fieldWaiting); ok {
		r.Waiting = toCount(a.val[slot])
	}
	if slot, ok := a.first(s, fieldRunning); ok {
		r.Running = toCount(a.val[slot])
	}
	if slot, ok := a.first(s, fieldKVUsage); ok {
		r.KVUsage = toUnit(a.val[slot])
	}
	if slot, ok := a.first(s, fieldCacheInfo); ok {
		r.BlockSize, r.NumGPUBlocks = a.blockSize[slot], a.numBlocks[slot]
	} else {
		if slot, ok := a.first(s, fieldBlockSize); ok {
			r.BlockSize = toCount(a.val[slot])
		}
		if slot, ok := a.first(s, fieldNumBlocks); ok {
			r.NumGPUBlocks = toCount(a.val[slot])
		}
	}
	r.LoRA = mergeLoRA(a.loras)
	r.Models = a.models.result()
	r.Engines = a.engines
	counter := func(f field) float64 {
		if slot, ok := a.first(s, f); ok {
			return min(a.val[slot], maxCounter)
		}
		return 0
	}
	r.Counters = Counters{
		PromptTokens: counter(fieldPromptTokens), PrefixQueries: counter(fieldPrefixQueries), PrefixHits: counter(fieldPrefixHits),
		TierHits:       counter(fieldTierHits),
		PrefillSeconds: counter(fieldPrefillSum), Prefills: counter(fieldPrefillCount),
		DecodeSeconds: counter(fieldDecodeSum), DecodeTokens: counter(fieldDecodeCount),
	}
	return r, nil
}

// first returns the slot of the first of f's series that was seen.
func (a *accumulator) first(s *Schema, f field) (uint8, bool) {
	for _, slot := range s.slots[f] {
		if a.seen[slot] {
			return slot, true
		}
	}
	return 0, false
}

// maxCounter bounds a summed counter, so that absurd values stay finite.
const maxCounter = 1e18

// maxCount bounds request counts, so that absurd values stay comparable.
const maxCount = 1 << 30

// toCount turns a summed request gauge into a count: rounded, at least 0,
// at most maxCount.
func toCount(v float64) int {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= maxCount:
		return maxCount
	}
	return int(math.Round(v))
}

// toUnit clamps a usage fraction into [0,1].
func toUnit(v float64) float64 {
	switch {
	case math.IsNaN(v) || v <= 0:
		return 0
	case v >= 1:
		return 1
	}
	return v
}
