package server

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
)

// maxLoRASeries bounds the label combinations of vllm:lora_requests_info
// kept. vLLM keeps every combination it has set; the simulator keeps the
// most recent ones, which is all a reader of the newest needs.
const maxLoRASeries = 16

// loraInfo exports vllm:lora_requests_info as vLLM does: a gauge per
// combination of running and waiting adapters, valued with the Unix time it
// was last current, so the newest series is the present state.
type loraInfo struct {
	src     statsSource
	desc    *prometheus.Desc
	maxLoRA string
	now     func() time.Time

	mu     sync.Mutex
	series []loraSeries // oldest first
}

type loraSeries struct {
	running, waiting string
	at               float64
}

func newLoRAInfo(src statsSource, engineLabel string) *loraInfo {
	return &loraInfo{
		src: src,
		desc: prometheus.NewDesc("vllm:lora_requests_info", "Running stats on lora requests.",
			[]string{"max_lora", "running_lora_adapters", "waiting_lora_adapters"}, prometheus.Labels{"engine": engineLabel}),
		maxLoRA: strconv.Itoa(src.Config().MaxLoRAs),
		now:     time.Now,
	}
}

// Describe implements prometheus.Collector.
func (l *loraInfo) Describe(ch chan<- *prometheus.Desc) { ch <- l.desc }

// Collect implements prometheus.Collector: the present combination is
// stamped with the current time, then every kept one is sent.
func (l *loraInfo) Collect(ch chan<- prometheus.Metric) {
	st := l.src.Stats()
	l.update(st)
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range l.series {
		ch <- prometheus.MustNewConstMetric(l.desc, prometheus.GaugeValue, s.at, l.maxLoRA, s.running, s.waiting)
	}
}

func (l *loraInfo) update(st engine.Stats) {
	cur := loraSeries{
		running: strings.Join(st.RunningLoRAs, ","),
		waiting: strings.Join(st.WaitingLoRAs, ","),
		at:      float64(l.now().UnixNano()) / 1e9,
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, s := range l.series {
		if s.running == cur.running && s.waiting == cur.waiting {
			l.series = append(l.series[:i], l.series[i+1:]...)
			break
		}
	}
	l.series = append(l.series, cur)
	if n := len(l.series) - maxLoRASeries; n > 0 {
		l.series = append(l.series[:0], l.series[n:]...)
	}
}
