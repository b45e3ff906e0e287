package scrape

import (
	"fmt"
	"slices"
	"strings"
)

// Series names the samples of one metric that carry a value: the metric
// name and the label values a sample must have. Other labels may be there
// too.
type Series struct {
	Name   string
	Labels []LabelMatch
}

// LabelMatch is a label a sample must carry with this value.
type LabelMatch struct {
	Name, Value string
}

// String writes s as ParseSeries reads it: name{label="value",...}.
func (s Series) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	var b strings.Builder
	b.WriteString(s.Name)
	b.WriteByte('{')
	for i, l := range s.Labels {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(l.Name)
		b.WriteString(`="`)
		b.WriteString(labelEscaper.Replace(l.Value))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

// labelEscaper escapes a label value as the text format does.
var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// CacheInfo names an info-style gauge whose labels hold the KV-cache
// block size and block count, as vllm:cache_config_info does.
type CacheInfo struct {
	Series
	// BlockSizeLabel and NumBlocksLabel name the labels; empty means
	// block_size and num_gpu_blocks.
	BlockSizeLabel string
	NumBlocksLabel string
}

// Names tells the parser which series carry each value of a Report. Each
// field lists alternatives, the first present on a page winning: a list
// may hold the names of several model servers, or of several versions of
// one. An empty list leaves the value unreported.
type Names struct {
	// Waiting and Running are request gauges, summed over the samples.
	Waiting []Series
	Running []Series
	// KVUsage is the KV-cache usage as a fraction in [0,1], the largest
	// over the samples (several engines behind one page).
	KVUsage []Series
	// CacheInfo are info gauges with the block size and count as labels;
	// BlockSize and NumBlocks are gauges valued with them. An info gauge
	// present on the page wins over the valued gauges.
	CacheInfo []CacheInfo
	BlockSize []Series
	NumBlocks []Series
	// LoRA are gauges with vLLM's LoRA labels (max_lora,
	// running_lora_adapters, waiting_lora_adapters), valued with the time
	// of their last update.
	LoRA []Series
	// Counters the cost model calibrates itself from, summed over the
	// samples: prompt tokens, prefix-cache queries and hits (in tokens),
	// the prompt tokens loaded from an offloading tier or another store
	// behind the server's KV connector instead of computed (TierHits), and
	// the _sum and _count series of the prefill-time and inter-token
	// latency histograms.
	PromptTokens  []Series
	PrefixQueries []Series
	PrefixHits    []Series
	TierHits      []Series
	PrefillSum    []Series
	PrefillCount  []Series
	DecodeSum     []Series
	DecodeCount   []Series
}

// Model-server kinds that have presets.
const (
	// Auto reads vLLM's and SGLang's names, vLLM's first.
	Auto   = "auto"
	VLLM   = "vllm"
	SGLang = "sglang"
	// TRTLLM reads the names of trtllm-serve and, after them, of the
	// TensorRT-LLM backend of Triton Inference Server.
	TRTLLM = "trtllm"
)

// Kinds lists the kinds Preset knows, besides the aliases it accepts.
var Kinds = []string{Auto, VLLM, SGLang, TRTLLM}

// kindAliases are the engine names the upstream endpoint picker and its
// charts use.
var kindAliases = map[string]string{
	"trtllm-serve":        TRTLLM,
	"triton-tensorrt-llm": TRTLLM,
}

func plain(names ...string) []Series {
	out := make([]Series, len(names))
	for i, n := range names {
		out[i] = Series{Name: n}
	}
	return out
}

func labelled(name, label string, values ...string) []Series {
	out := make([]Series, len(values))
	for i, v := range values {
		out[i] = Series{Name: name, Labels: []LabelMatch{{label, v}}}
	}
	return out
}

func vllmNames() Names {
	return Names{
		Waiting:   plain("vllm:num_requests_waiting"),
		Running:   plain("vllm:num_requests_running"),
		KVUsage:   plain("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
		CacheInfo: []CacheInfo{{Series: Series{Name: "vllm:cache_config_info"}}},
		LoRA:      plain("vllm:lora_requests_info"),
		// vLLM V1 names first, then those of the releases before them.
		PromptTokens:  plain("vllm:prompt_tokens_total"),
		PrefixQueries: plain("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
		PrefixHits:    plain("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
		TierHits:      plain("vllm:external_prefix_cache_hits_total"),
		PrefillSum:    plain("vllm:request_prefill_time_seconds_sum"),
		PrefillCount:  plain("vllm:request_prefill_time_seconds_count"),
		DecodeSum:     plain("vllm:inter_token_latency_seconds_sum", "vllm:time_per_output_token_seconds_sum"),
		DecodeCount:   plain("vllm:inter_token_latency_seconds_count", "vllm:time_per_output_token_seconds_count"),
	}
}

func sglangNames() Names {
	return Names{
		Waiting: plain("sglang:num_queue_reqs"),
		Running: plain("sglang:num_running_reqs"),
		KVUsage: plain("sglang:token_usage"),
		CacheInfo: []CacheInfo{{Series: Series{Name: "sglang:cache_config_info"},
			BlockSizeLabel: "page_size", NumBlocksLabel: "num_pages"}},
	}
}

func trtllmNames() Names {
	const triton, tritonKV = "nv_trt_llm_request_metrics", "nv_trt_llm_kv_cache_block_metrics"
	return Names{
		Waiting:   append(plain("trtllm_num_requests_waiting"), labelled(triton, "request_type", "waiting")...),
		Running:   append(plain("trtllm_num_requests_running"), labelled(triton, "request_type", "scheduled")...),
		KVUsage:   append(plain("trtllm_kv_cache_utilization"), labelled(tritonKV, "kv_cache_block_type", "fraction")...),
		BlockSize: append(plain("trtllm_kv_cache_tokens_per_block"), labelled(tritonKV, "kv_cache_block_type", "tokens_per")...),
		NumBlocks: append(plain("trtllm_kv_cache_max_blocks"), labelled(tritonKV, "kv_cache_block_type", "max")...),
	}
}

// join lists a's alternatives before b's.
func join(a, b Names) Names {
	return Names{
		Waiting:   slices.Concat(a.Waiting, b.Waiting),
		Running:   slices.Concat(a.Running, b.Running),
		KVUsage:   slices.Concat(a.KVUsage, b.KVUsage),
		CacheInfo: slices.Concat(a.CacheInfo, b.CacheInfo),
		BlockSize: slices.Concat(a.BlockSize, b.BlockSize),
		NumBlocks: slices.Concat(a.NumBlocks, b.NumBlocks),
		LoRA:      slices.Concat(a.LoRA, b.LoRA),

		PromptTokens:  slices.Concat(a.PromptTokens, b.PromptTokens),
		PrefixQueries: slices.Concat(a.PrefixQueries, b.PrefixQueries),
		PrefixHits:    slices.Concat(a.PrefixHits, b.PrefixHits),
		TierHits:      slices.Concat(a.TierHits, b.TierHits),
		PrefillSum:    slices.Concat(a.PrefillSum, b.PrefillSum),
		PrefillCount:  slices.Concat(a.PrefillCount, b.PrefillCount),
		DecodeSum:     slices.Concat(a.DecodeSum, b.DecodeSum),
		DecodeCount:   slices.Concat(a.DecodeCount, b.DecodeCount),
	}
}

// Preset returns the names a kind of model server exports: one of Kinds,
// or the upstream engine names trtllm-serve and triton-tensorrt-llm.
func Preset(kind string) (Names, error) {
	if k, ok := kindAliases[kind]; ok {
		kind = k
	}
	switch kind {
	case Auto, "":
		return join(vllmNames(), sglangNames()), nil
	case VLLM:
		return vllmNames(), nil
	case SGLang:
		return sglangNames(), nil
	case TRTLLM:
		return trtllmNames(), nil
	}
	return Names{}, fmt.Errorf("unknown model server %q: want one of %s, trtllm-serve or triton-tensorrt-llm",
		kind, strings.Join(Kinds, ", "))
}

// CacheInfoLabels returns the label names the presets read from the info
// gauge name: page_size and num_pages for sglang:cache_config_info,
// block_size and num_gpu_blocks otherwise.
func CacheInfoLabels(name string) (blockSize, numBlocks string) {
	if name == "sglang:cache_config_info" {
		return "page_size", "num_pages"
	}
	return defaultBlockSizeLabel, defaultNumBlocksLabel
}

const (
	defaultBlockSizeLabel = "block_size"
	defaultNumBlocksLabel = "num_gpu_blocks"
)
