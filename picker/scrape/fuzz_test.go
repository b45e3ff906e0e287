package scrape

import (
	"bytes"
	"errors"
	"maps"
	"math"
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// FuzzParse checks that Parse never panics, keeps its results in range,
// and reads exactly what the reference parser reads whenever the reference
// parser accepts the input.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		vllmPage(pageSpec{models: []string{"m"}, waiting: 1, running: 2, kv: 0.5}),
		vllmV0Page,
		sglangPage,
		"vllm:num_requests_waiting{model_name=\"a \\\"b\\\"\"} 2 1700000000000\n",
		"{\"vllm:num_requests_running\",engine=\"0\"} 3\n",
		"vllm:num_requests_running{engine=\"0\"} 1\nvllm:num_requests_running{engine=\"1\"} 2\n" +
			"vllm:num_requests_running{engine=\"63\"} 0\nvllm:num_requests_running{engine=\"64\"} 0\nvllm:num_requests_running{engine=\"-0\"} 0\n",
		"vllm:num_\"requests_waiting\" 4\n",
		"vllm:kv_cache_usage_perc NaN\nvllm:gpu_cache_usage_perc +Inf\n",
		"vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"x,y\",waiting_lora_adapters=\"\"} 5\n",
		"vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"a,,b, a\",waiting_lora_adapters=\",\"} 1.7e+09\n" +
			"vllm:lora_requests_info{max_lora=\"2\",running_lora_adapters=\"\",waiting_lora_adapters=\"c,c\"} 1.8e+09\n" +
			"vllm:lora_requests_info{max_lora=\"\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 1.6e+09\n",
		"vllm:lora_requests_info{max_lora=\"4\",running_lora_adapters=\"x\"} 3\nvllm:lora_requests_info{waiting_lora_adapters=\"y\\\\,z\"} 3\n",
		"vllm:lora_requests_info{engine=\"0\",max_lora=\"2\",running_lora_adapters=\"a\",waiting_lora_adapters=\"b\"} 2\n" +
			"vllm:lora_requests_info{engine=\"1\",max_lora=\"2\",running_lora_adapters=\"b,c\",waiting_lora_adapters=\"\"} 1\n" +
			"vllm:lora_requests_info{engine=\"1\",max_lora=\"2\",running_lora_adapters=\"old\",waiting_lora_adapters=\"\"} 0.5\n" +
			"vllm:lora_requests_info{max_lora=\"1\",running_lora_adapters=\"x\",waiting_lora_adapters=\"\"} 3\n",
		"vllm:lora_requests_info{max_lora=\"None\",running_lora_adapters=\"\\\"q\\\",r\",waiting_lora_adapters=\"\"} NaN\n",
		"vllm:num_requests_running{model_name=\"base\"} 1\nvllm:num_requests_running{model_name=\"sql\\\"x\"} 1\n" +
			"vllm:num_requests_waiting{model_name=\"\"} 1\nvllm:num_requests_waiting{model_name=\"base\"} 1\nother{model_name=\"z\"} 1\n",
		"# TYPE vllm:num_requests_waiting summary\nvllm:num_requests_waiting{quantile=\"0.5\"} 1\n",
		"sglang:num_queue_reqs 1\r\nsglang:token_usage .5",
		"<html>\n",
		"vllm:prefix_cache_hits_total -Inf\nvllm:gpu_prefix_cache_queries_total 1e300\nvllm:prompt_tokens_total{a=\"b\"} 7\n",
		"# TYPE vllm:request_prefill_time_seconds histogram\nvllm:request_prefill_time_seconds_sum 2.5\nvllm:request_prefill_time_seconds_count 3\n",
		"vllm:time_per_output_token_seconds_sum 1\nvllm:inter_token_latency_seconds_count NaN\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		checkParse(t, defaultSchema, body)
	})
}

// FuzzParseSchema checks every preset's schema as FuzzParse checks the
// default one; the first byte picks the preset.
func FuzzParseSchema(f *testing.F) {
	for i, page := range []string{vllmV0Page, sglangPage, trtllmServePage, tritonPage,
		"trtllm_num_requests_waiting{engine_type=\"trtllm\"} 3\nnv_trt_llm_request_metrics{request_type=waiting} 1\n",
		"nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",kv_cache_block_type=\"max\"} 1\n",
		"{\"nv_trt_llm_request_metrics\",request_type=\"sched\\\"uled\"} 2\n",
		"sglang:cache_config_info{page_size=\"1\",num_pages=\"9\"} 1\n",
	} {
		f.Add(uint8(i), []byte(page))
	}
	schemas := make([]*Schema, len(Kinds))
	for i, kind := range Kinds {
		names, err := Preset(kind)
		if err != nil {
			f.Fatal(err)
		}
		if schemas[i], err = NewSchema(names); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, pick uint8, body []byte) {
		checkParse(t, schemas[int(pick)%len(schemas)], body)
	})
}

// checkParse checks that s.Parse keeps its results in range and reads what
// the reference parser reads whenever the reference parser accepts body.
func checkParse(t *testing.T, s *Schema, body []byte) {
	t.Helper()
	got, err := s.Parse(body)
	if err != nil && !errors.Is(err, ErrNoMetrics) {
		t.Fatalf("Parse() error = %v, want nil or ErrNoMetrics", err)
	}
	if got.Waiting < 0 || got.Running < 0 || got.Waiting > maxCount || got.Running > maxCount {
		t.Fatalf("counts out of range: %+v", got)
	}
	if !(got.KVUsage >= 0 && got.KVUsage <= 1) {
		t.Fatalf("KVUsage %v out of [0,1]", got.KVUsage)
	}
	if got.BlockSize < 0 || got.NumGPUBlocks < 0 || got.Malformed < 0 {
		t.Fatalf("negative field: %+v", got)
	}

	p := expfmt.NewTextParser(model.UTF8Validation)
	families, perr := p.TextToMetricFamilies(bytes.NewReader(body))
	if perr != nil {
		return
	}
	want, checkable := reportFromFamilies(s, families)
	if !checkable {
		return
	}
	if got.Malformed != 0 {
		t.Errorf("Parse() skipped %d lines the reference parser accepts", got.Malformed)
	}
	got.Malformed = 0
	if (err == nil) != (want != nil) {
		t.Fatalf("Parse() error = %v, reference found metrics: %v", err, want != nil)
	}
	if want == nil {
		return
	}
	if diff := cmp.Diff(*want, got); diff != "" {
		t.Errorf("Parse() disagrees with the reference parser (-want +got):\n%s", diff)
	}
}

// reportFromFamilies computes, from the reference parser's output, the
// report Parse should return. It returns nil when none of the series is
// present, and false when one of them is typed as a summary or histogram,
// whose samples the reference parser regroups.
func reportFromFamilies(s *Schema, families map[string]*dto.MetricFamily) (*Report, bool) {
	var a accumulator
	models := map[string]bool{}
	// Parse names a model by the model_name label of every series it
	// reads, whether a plain sample or a histogram's _sum or _count line.
	noteModel := func(labels map[string]string, tg target) {
		if m := labels["model_name"]; m != "" && tg.field != fieldCacheInfo {
			models[m] = true
		}
	}
	for name, family := range families {
		if family.GetType() == dto.MetricType_HISTOGRAM && len(s.byName[name]) == 0 {
			// The reference regroups a histogram's _sum and _count lines,
			// which Parse reads as series of their own.
			for _, suffix := range []string{"_sum", "_count"} {
				for _, series := range family.GetMetric() {
					h := series.GetHistogram()
					// A sample of the family's bare name leaves both unset:
					// no _sum or _count line was read.
					v, present := h.GetSampleSum(), h.SampleSum != nil
					if suffix == "_count" {
						// A count that is not a whole number is kept as a float.
						v, present = float64(h.GetSampleCount()), h.SampleCount != nil
						if h.SampleCountFloat != nil {
							v, present = h.GetSampleCountFloat(), true
						}
					}
					if !present {
						continue
					}
					labels := map[string]string{}
					for _, l := range series.GetLabel() {
						labels[l.GetName()] = l.GetValue()
					}
					for _, tg := range s.byName[name+suffix] {
						if matchesMap(labels, tg.match) {
							a.seen[tg.slot] = true
							noteModel(labels, tg)
							if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
								a.val[tg.slot] += v
							}
						}
					}
				}
			}
			continue
		}
		ts := s.byName[name]
		if len(ts) == 0 {
			continue
		}
		switch family.GetType() {
		case dto.MetricType_SUMMARY, dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
			return nil, false
		}
		for _, series := range family.GetMetric() {
			v := series.GetGauge().GetValue() + series.GetCounter().GetValue() + series.GetUntyped().GetValue()
			labels := map[string]string{}
			for _, l := range series.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for _, tg := range ts {
				if !matchesMap(labels, tg.match) {
					continue
				}
				a.seen[tg.slot] = true
				noteModel(labels, tg)
				if e, err := strconv.Atoi(labels["engine"]); tg.field == fieldRunning && err == nil && e < 64 && (e > 0 || labels["engine"] == "0") {
					a.engines |= 1 << e
				}
				switch tg.field {
				case fieldWaiting, fieldRunning:
					if !math.IsNaN(v) {
						a.val[tg.slot] += v
					}
				case fieldPromptTokens, fieldPrefixQueries, fieldPrefixHits, fieldTierHits, fieldPrefillSum, fieldPrefillCount, fieldDecodeSum, fieldDecodeCount:
					if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
						a.val[tg.slot] += v
					}
				case fieldKVUsage, fieldBlockSize, fieldNumBlocks:
					if !math.IsNaN(v) {
						a.val[tg.slot] = math.Max(a.val[tg.slot], v)
					}
				case fieldCacheInfo:
					a.blockSize[tg.slot] = max(a.blockSize[tg.slot], intOf(labels[tg.blockSizeLabel]))
					a.numBlocks[tg.slot] = max(a.numBlocks[tg.slot], intOf(labels[tg.numBlocksLabel]))
				case fieldLoRA:
					// Each engine's newest series, the engines in the order
					// first seen.
					i := slices.IndexFunc(a.loras, func(e engineLoRA) bool { return e.engine == labels["engine"] })
					if math.IsNaN(v) || i >= 0 && v < a.loras[i].at || i < 0 && len(a.loras) == maxLoRAEngines {
						continue
					}
					e := engineLoRA{engine: labels["engine"], at: v, info: &LoRAInfo{
						MaxLoRA: intOf(labels["max_lora"]),
						Running: adapterList(labels["running_lora_adapters"]),
						Waiting: adapterList(labels["waiting_lora_adapters"]),
					}}
					if i < 0 {
						a.loras = append(a.loras, e)
					} else {
						a.loras[i] = e
					}
				}
			}
		}
	}
	r, err := a.report(s)
	if err != nil {
		return nil, true
	}
	if len(models) > 0 {
		r.Models = slices.Sorted(maps.Keys(models))
	}
	return &r, true
}

func matchesMap(labels map[string]string, want []LabelMatch) bool {
	for _, w := range want {
		if v, ok := labels[w.Name]; !ok || v != w.Value {
			return false
		}
	}
	return true
}

func intOf(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
