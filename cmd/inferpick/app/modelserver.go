package app

import (
	"flag"
	"fmt"
	"strings"

	"github.com/inferpick/inferpick/picker/scrape"
)

// modelServer holds the flags that say which series of the model servers'
// metrics pages the scraper reads: a preset, and the upstream endpoint
// picker's per-metric flags, each of which replaces the preset's series
// for its value when given.
type modelServer struct {
	Type      string
	Queued    string
	Running   string
	KVUsage   string
	LoRA      string
	CacheInfo string

	names scrape.Names
}

// newModelServer returns the defaults: the Auto preset.
func newModelServer() modelServer {
	names, _ := scrape.Preset(scrape.Auto)
	return modelServer{Type: scrape.Auto, names: names}
}

// Names of the metric flags, as the upstream endpoint picker spells them.
const (
	flagModelServerType = "model-server-type"
	flagQueuedMetric    = "total-queued-requests-metric"
	flagRunningMetric   = "total-running-requests-metric"
	flagKVUsageMetric   = "kv-cache-usage-percentage-metric"
	flagLoRAMetric      = "lora-info-metric"
	flagCacheInfoMetric = "cache-info-metric"
)

func (m *modelServer) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&m.Type, flagModelServerType, m.Type, "Kind of model server whose metrics are read: "+
		strings.Join(scrape.Kinds, ", ")+" (trtllm-serve and triton-tensorrt-llm are trtllm); auto reads vLLM's and SGLang's names.")
	const spec = " (a name, or name{label=\"value\"}; empty reads nothing); default: the --model-server-type preset's."
	fs.StringVar(&m.Queued, flagQueuedMetric, "", "Metric of the number of queued requests"+spec)
	fs.StringVar(&m.Running, flagRunningMetric, "", "Metric of the number of running requests"+spec)
	fs.StringVar(&m.KVUsage, flagKVUsageMetric, "", "Metric of the KV-cache usage, a fraction from 0 to 1"+spec)
	fs.StringVar(&m.LoRA, flagLoRAMetric, "", "Metric of the LoRA adapters, with vLLM's labels"+spec)
	fs.StringVar(&m.CacheInfo, flagCacheInfoMetric, "", "Info metric whose labels hold the KV-cache block size and count "+
		"(block_size and num_gpu_blocks; page_size and num_pages for sglang:cache_config_info)"+spec)
}

// complete builds the scraper's names from the preset and the metric flags
// given on the command line; given reports whether a flag was.
func (m *modelServer) complete(given func(name string) bool) error {
	names, err := scrape.Preset(strings.Trim(m.Type, `"`))
	if err != nil {
		return fmt.Errorf("--%s: %w", flagModelServerType, err)
	}
	for _, f := range []struct {
		flag string
		spec string
		set  func(s []scrape.Series)
	}{
		{flagQueuedMetric, m.Queued, func(s []scrape.Series) { names.Waiting = s }},
		{flagRunningMetric, m.Running, func(s []scrape.Series) { names.Running = s }},
		{flagKVUsageMetric, m.KVUsage, func(s []scrape.Series) { names.KVUsage = s }},
		{flagLoRAMetric, m.LoRA, func(s []scrape.Series) { names.LoRA = s }},
		{flagCacheInfoMetric, m.CacheInfo, func(s []scrape.Series) {
			names.CacheInfo = nil
			for _, series := range s {
				bs, nb := scrape.CacheInfoLabels(series.Name)
				names.CacheInfo = append(names.CacheInfo, scrape.CacheInfo{Series: series, BlockSizeLabel: bs, NumBlocksLabel: nb})
			}
		}},
	} {
		if !given(f.flag) {
			continue
		}
		series, err := scrape.ParseSeries(f.spec)
		if err != nil {
			return fmt.Errorf("--%s: %w", f.flag, err)
		}
		if series.Name == "" {
			f.set(nil)
			continue
		}
		f.set([]scrape.Series{series})
	}
	if _, err := scrape.NewSchema(names); err != nil {
		return fmt.Errorf("model-server metric names: %w", err)
	}
	m.names = names
	return nil
}
