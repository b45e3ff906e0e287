package scrape

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
)

// ErrNoMetrics is returned by Parse when the body holds none of the series
// it looks for: the page is not a model server's, or is garbage.
var ErrNoMetrics = errors.New("no model-server metrics in body")

// Report is what one /metrics page says about a worker. Zero values mean
// "not reported".
type Report struct {
	// Waiting is the number of queued requests: vllm:num_requests_waiting,
	// or sglang:num_queue_reqs; the sum over all series.
	Waiting int
	// Running is the number of requests being processed:
	// vllm:num_requests_running, or sglang:num_running_reqs; the sum over
	// all series.
	Running int
	// KVUsage is the KV-cache usage in [0,1]: vllm:kv_cache_usage_perc,
	// else the older vllm:gpu_cache_usage_perc, else sglang:token_usage;
	// the largest over all series.
	KVUsage float64
	// BlockSize and NumGPUBlocks are the block_size and num_gpu_blocks
	// labels of vllm:cache_config_info (largest over its series).
	BlockSize    int
	NumGPUBlocks int
	// LoRA is read from vllm:lora_requests_info; nil when absent.
	LoRA *LoRAInfo
	// Malformed counts the sample lines that could not be read and were
	// skipped. Only lines of the series above are read in full; other lines
	// are checked no further than their first byte.
	Malformed int
}

// LoRAInfo is the adapter state a vLLM server reports in
// vllm:lora_requests_info. vLLM keeps one series per label combination it
// has seen, valued with the time of its last update, so the series with the
// largest value is the current one.
type LoRAInfo struct {
	MaxLoRA int      // max_lora: adapters a batch may hold
	Running []string // running_lora_adapters
	Waiting []string // waiting_lora_adapters
}

// metric names the series Parse reads.
type metric uint8

const (
	otherMetric metric = iota
	vllmWaiting
	vllmRunning
	vllmKVUsage
	vllmGPUCacheUsage
	vllmCacheConfig
	vllmLoRA
	sglangWaiting
	sglangRunning
	sglangUsage
	numMetrics
)

func lookup(name []byte) metric {
	switch string(name) {
	case "vllm:num_requests_waiting":
		return vllmWaiting
	case "vllm:num_requests_running":
		return vllmRunning
	case "vllm:kv_cache_usage_perc":
		return vllmKVUsage
	case "vllm:gpu_cache_usage_perc":
		return vllmGPUCacheUsage
	case "vllm:cache_config_info":
		return vllmCacheConfig
	case "vllm:lora_requests_info":
		return vllmLoRA
	case "sglang:num_queue_reqs":
		return sglangWaiting
	case "sglang:num_running_reqs":
		return sglangRunning
	case "sglang:token_usage":
		return sglangUsage
	}
	return otherMetric
}

// Parse reads a Prometheus text exposition body. Lines end in LF or CRLF;
// the last may lack its end. It never fails on a malformed line (it skips
// and counts it) and returns ErrNoMetrics when none of the series it reads
// is present.
func Parse(body []byte) (Report, error) {
	var a accumulator
	var scratch [maxName]byte
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		a.line(line, &scratch)
	}
	return a.report()
}

// accumulator folds the samples of one body.
type accumulator struct {
	seen      [numMetrics]bool
	sum       [numMetrics]float64 // request gauges: sum of non-NaN values
	max       [numMetrics]float64 // usage gauges: largest value, at least 0
	blockSize int
	numBlocks int
	lora      *LoRAInfo
	loraAt    float64
	malformed int
}

func (a *accumulator) line(line []byte, scratch *[maxName]byte) {
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
	switch first := line[0]; {
	case first == 'v' || first == 's':
		// Possibly ours: look at the whole name before reading further.
		c := cursor{b: line}
		name, ok := c.name(false, scratch)
		if !ok {
			a.malformed++
			return
		}
		if lookup(name) == otherMetric {
			return
		}
	case first == '{' || first == '"':
	case isNameStart(first, false):
		return // another metric
	default:
		a.malformed++
		return
	}
	s, ok := parseSample(line, scratch)
	if !ok {
		a.malformed++
		return
	}
	a.add(lookup(s.name), &s)
}

func (a *accumulator) add(m metric, s *sample) {
	if m == otherMetric {
		return
	}
	a.seen[m] = true
	v := s.value
	switch m {
	case vllmWaiting, vllmRunning, sglangWaiting, sglangRunning:
		if !math.IsNaN(v) {
			a.sum[m] += v
		}
	case vllmKVUsage, vllmGPUCacheUsage, sglangUsage:
		if v > a.max[m] {
			a.max[m] = v
		}
	case vllmCacheConfig:
		it := labelIter{c: cursor{b: s.labels}}
		a.cacheConfig(&it)
	case vllmLoRA:
		if math.IsNaN(v) || a.lora != nil && v < a.loraAt {
			return
		}
		it := labelIter{c: cursor{b: s.labels}}
		a.lora, a.loraAt = loraInfo(&it), v
	}
}

// cacheConfig takes block_size and num_gpu_blocks from one series of
// vllm:cache_config_info.
func (a *accumulator) cacheConfig(it *labelIter) {
	for {
		l, ok := it.next()
		if !ok {
			return
		}
		switch string(l.key) {
		case "block_size":
			a.blockSize = max(a.blockSize, labelInt(l))
		case "num_gpu_blocks":
			a.numBlocks = max(a.numBlocks, labelInt(l))
		}
	}
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

// adapterList splits vLLM's comma-separated adapter names.
func adapterList(s string) []string {
	var out []string
	for name := range strings.SplitSeq(s, ",") {
		if name = strings.TrimSpace(name); name != "" {
			out = append(out, name)
		}
	}
	return out
}

func (a *accumulator) report() (Report, error) {
	r := Report{Malformed: a.malformed}
	found := false
	for _, seen := range a.seen {
		found = found || seen
	}
	if !found {
		return r, ErrNoMetrics
	}
	r.Waiting = toCount(a.pick(a.sum, vllmWaiting, sglangWaiting))
	r.Running = toCount(a.pick(a.sum, vllmRunning, sglangRunning))
	r.KVUsage = toUnit(a.pick(a.max, vllmKVUsage, vllmGPUCacheUsage, sglangUsage))
	r.BlockSize, r.NumGPUBlocks = a.blockSize, a.numBlocks
	r.LoRA = a.lora
	return r, nil
}

// pick returns the value of the first of ms that was seen.
func (a *accumulator) pick(vals [numMetrics]float64, ms ...metric) float64 {
	for _, m := range ms {
		if a.seen[m] {
			return vals[m]
		}
	}
	return 0
}

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
