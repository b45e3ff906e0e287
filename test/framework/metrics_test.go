package framework

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParseMetricsLabelValues reads label values a hand-split parser gets
// wrong: commas, quotes, escapes and braces inside the quotes.
func TestParseMetricsLabelValues(t *testing.T) {
	page := `# HELP vllm:lora_requests_info Running LoRA adapters.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{running_lora_adapters="a,b",waiting_lora_adapters=""} 1
# TYPE inferpick_requests_total counter
inferpick_requests_total{model="say \"hi\", then {bye}",code="200"} 3
inferpick_requests_total{model="back\\slash",code="429"} 2
# TYPE inferpick_pick_duration_seconds histogram
inferpick_pick_duration_seconds_bucket{le="0.001"} 4
inferpick_pick_duration_seconds_bucket{le="+Inf"} 5
inferpick_pick_duration_seconds_sum 0.002
inferpick_pick_duration_seconds_count 5
`
	ms, err := ParseMetrics(strings.NewReader(page))
	if err != nil {
		t.Fatal(err)
	}
	want := Metrics{
		{Name: "inferpick_pick_duration_seconds", Labels: map[string]string{}, Value: 5},
		{Name: "inferpick_requests_total", Labels: map[string]string{"model": `say "hi", then {bye}`, "code": "200"}, Value: 3},
		{Name: "inferpick_requests_total", Labels: map[string]string{"model": `back\slash`, "code": "429"}, Value: 2},
		{Name: "vllm:lora_requests_info", Labels: map[string]string{"running_lora_adapters": "a,b", "waiting_lora_adapters": ""}, Value: 1},
	}
	if diff := cmp.Diff(want, ms); diff != "" {
		t.Errorf("ParseMetrics (-want +got):\n%s", diff)
	}
	if got := ms.Sum("inferpick_requests_total", "model", `say "hi", then {bye}`); got != 3 {
		t.Errorf("Sum by a label value with a comma and quotes = %v, want 3", got)
	}
	if !ms.Has("vllm:lora_requests_info", "running_lora_adapters", "a,b") {
		t.Errorf("Has(running_lora_adapters=a,b) = false")
	}
	if diff := cmp.Diff(map[string]float64{"200": 3, "429": 2}, ms.SumBy("inferpick_requests_total", "code")); diff != "" {
		t.Errorf("SumBy (-want +got):\n%s", diff)
	}
}

// TestParseMetricsRejects checks that a broken page is an error, not a
// silently short one.
func TestParseMetricsRejects(t *testing.T) {
	for name, page := range map[string]string{
		"no value":        "inferpick_requests_total{code=\"200\"}\n",
		"unclosed quote":  "inferpick_requests_total{code=\"200} 1\n",
		"not a number":    "inferpick_requests_total 1x\n",
		"unclosed braces": "inferpick_requests_total{code=\"200\" 1\n",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseMetrics(strings.NewReader(page)); err == nil {
				t.Errorf("ParseMetrics(%q) = nil error", page)
			}
		})
	}
}

// FuzzParseMetrics checks that no input panics the reader and that what it
// reads it reads whole: every sample has a name.
func FuzzParseMetrics(f *testing.F) {
	f.Add("a{b=\"c,d\"} 1\n")
	f.Add("# TYPE x histogram\nx_bucket{le=\"+Inf\"} 1\nx_count 1\nx_sum 0\n")
	f.Fuzz(func(t *testing.T, page string) {
		ms, err := ParseMetrics(strings.NewReader(page))
		if err != nil {
			return
		}
		for _, s := range ms {
			if s.Name == "" {
				t.Fatalf("a sample without a name from %q", page)
			}
		}
	})
}
