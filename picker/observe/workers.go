// Package observe shows the registry to operators: per-worker Prometheus
// series read at scrape time, and the /debug/workers JSON view.
package observe

import (
	"encoding/json"
	"net/http"
	"time"

	"k8s.io/utils/clock"

	"github.com/inferpick/inferpick/picker/registry"
)

// WorkerView is one worker as /debug/workers shows it.
type WorkerView struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	UID       string `json:"uid,omitempty"`
	Address   string `json:"address"`
	// Rank is the data-parallel rank of the port (its place in the pool's
	// target ports); absent for 0.
	Rank int `json:"rank,omitempty"`
	// Role is what the pod's llm-d.ai/role label says it serves: decode,
	// prefill, prefill-decode, or none (a label of neither, such as
	// encode); absent without a label, when the pod decodes and prefills
	// only its own requests.
	Role string `json:"role,omitempty"`
	// ContextLength is the prompt lengths, in tokens, the pod's
	// context-length label says it is meant for ("0-2048"), as the policy's
	// contextLength reads it; absent without a label, or with one that does
	// not parse.
	ContextLength string `json:"contextLength,omitempty"`
	// Labels are the pod's labels that the policy's label filters read
	// (labelFilters, disaggregation.prefillLabelFilters and
	// encodeLabelFilters), as the pod
	// carries them now; absent when it carries none of them.
	Labels map[string]string `json:"labels,omitempty"`
	// Engines are the data-parallel engines the server fronts behind the
	// port, by the index its metrics label each with; absent for engine 0
	// alone.
	Engines []int `json:"engines,omitempty"`
	// Parked is set while the worker's pod is unready but its server runs
	// on: the worker is out of the picks, and keeps what was learned of the
	// server and the requests still running there (counted in Load) until
	// the pod is Ready again or gone. ParkedSince is when it was parked.
	Parked      bool       `json:"parked,omitempty"`
	ParkedSince *time.Time `json:"parkedSince,omitempty"`
	// Restarts are the restarts of the pod's containers that serve the
	// port, as its status counts them; ServerRestarts those of the model
	// server behind the port the scraper has seen (a cumulative counter
	// that went back): each lost the server's cache. Absent for none.
	Restarts       int32  `json:"restarts,omitempty"`
	ServerRestarts uint32 `json:"serverRestarts,omitempty"`
	Load           int64  `json:"load"`
	Prefill        int64  `json:"prefill"`
	Decode         int64  `json:"decode"`
	// Scraped model-server view; absent until the first scrape.
	Waiting      *int     `json:"waiting,omitempty"`
	Running      *int     `json:"running,omitempty"`
	KVUsage      *float64 `json:"kvCacheUsage,omitempty"`
	KVBlocks     int      `json:"kvCacheBlocks,omitempty"`
	BlockSize    int      `json:"blockSize,omitempty"`
	MetricsAgeMS *int64   `json:"metricsAgeMs,omitempty"`
	// Models the worker serves (base models, then LoRA adapters as
	// "name (parent)"), and the LoRA adapters in use with the slots.
	Models       []string `json:"models,omitempty"`
	LoRAAdapters []string `json:"loraAdapters,omitempty"`
	MaxLoRA      int      `json:"maxLora,omitempty"`
	// Calibration is what the policy learned of the worker's model
	// server; absent for policies that keep no prefix index.
	Calibration *CalibrationView `json:"calibration,omitempty"`
	// Latency is what the policy's latency model (its slo block) learned
	// of the worker; absent before its first sample.
	Latency *LatencyView `json:"latency,omitempty"`
	// LeastTPOTObjectiveMS is the least x-slo-tpot-ms of this picker's
	// requests in flight on the worker that stated one; absent for none.
	LeastTPOTObjectiveMS *float64 `json:"leastTpotObjectiveMs,omitempty"`
	// KVEventBlocks are the blocks the worker's KV-cache events say it
	// holds (over its engines, on its GPUs or offloaded); absent when the
	// picker reads no events (--kv-events-port).
	KVEventBlocks *int `json:"kvEventBlocks,omitempty"`
	// KVEventOffloadedBlocks are those of KVEventBlocks held only in an
	// offloading tier (copied there, then evicted from the GPU).
	KVEventOffloadedBlocks *int `json:"kvEventOffloadedBlocks,omitempty"`
}

// HeldBlocks returns the blocks a worker's KV-cache events say it holds,
// by the worker's ID, and how many of them only an offloading tier holds.
type HeldBlocks func(id uint32) (blocks, offloaded int)

// CalibrationView is a worker's calibration as /debug/workers shows it:
// each figure with the signal it came from.
type CalibrationView struct {
	PrefillUSPerToken  float64 `json:"prefillUsPerToken"`
	MeanPrefillMS      float64 `json:"meanPrefillMs"`
	PrefillSource      string  `json:"prefillSource"`
	DecodeMSPerToken   float64 `json:"decodeMsPerToken"`
	DecodeSource       string  `json:"decodeSource"`
	BlocksPerLoadScale float64 `json:"blocksPerLoadScale"`
	BytesPerToken      float64 `json:"bytesPerToken"`
	CapacityBlocks     int     `json:"capacityBlocks"`
	CapacityScale      float64 `json:"capacityScale"`
	CapacitySource     string  `json:"capacitySource"`
	HitRatio           float64 `json:"prefixHitsOverPredicted"`
	MaxSeqs            int     `json:"maxNumSeqs"`
	MaxSeqsSource      string  `json:"maxNumSeqsSource"`
}

func calibrationView(c *registry.Calibration) *CalibrationView {
	return &CalibrationView{
		PrefillUSPerToken: float64(c.PrefillPerToken) / float64(time.Microsecond), PrefillSource: c.PrefillSource,
		MeanPrefillMS:    float64(c.MeanPrefill) / float64(time.Millisecond),
		DecodeMSPerToken: float64(c.DecodePerToken) / float64(time.Millisecond), DecodeSource: c.DecodeSource,
		BlocksPerLoadScale: c.BlocksPerLoadScale, BytesPerToken: c.BytesPerToken,
		CapacityBlocks: c.CapacityBlocks, CapacityScale: c.CapacityScale, CapacitySource: c.CapacitySource,
		HitRatio: c.HitRatio, MaxSeqs: c.MaxSeqs, MaxSeqsSource: c.MaxSeqsSource,
	}
}

// LatencyView is how much slower than the latency model a worker's
// requests have been: the mean ratio of observed to predicted time to
// first token and time per output token, and the samples each is of.
type LatencyView struct {
	TTFTFactor  float64 `json:"ttftFactor"`
	TTFTSamples int     `json:"ttftSamples"`
	TPOTFactor  float64 `json:"tpotFactor"`
	TPOTSamples int     `json:"tpotSamples"`
}

// WorkersView is the /debug/workers document.
type WorkersView struct {
	Synced bool `json:"synced"`
	// Workers are the workers of the registry, those parked too, ordered
	// by address.
	Workers []WorkerView `json:"workers"`
}

// Live counts the workers of v that may be picked: those not parked.
func (v WorkersView) Live() int {
	n := 0
	for i := range v.Workers {
		if !v.Workers[i].Parked {
			n++
		}
	}
	return n
}

// Snapshot returns the registry as /debug/workers shows it, parked workers
// too, with each worker's blocks by its KV-cache events when held is not
// nil.
func Snapshot(reg SyncedWorkers, now time.Time, held HeldBlocks) WorkersView {
	ws := reg.AllWorkers()
	v := WorkersView{Synced: reg.Synced(), Workers: make([]WorkerView, 0, len(ws))}
	for _, w := range ws {
		ep := w.Endpoint()
		p, d := w.Load()
		wv := WorkerView{
			Name: ep.Name, Namespace: ep.Namespace, UID: ep.Key.UID, Address: w.Address(), Rank: ep.Rank, Role: ep.Role.String(), ContextLength: ep.Context.String(),
			Labels: ep.Labels.Map(), Restarts: ep.Restarts,
			Load: p + d, Prefill: p, Decode: d,
		}
		if since, ok := w.ParkedSince(); ok {
			wv.Parked, wv.ParkedSince = true, &since
		}
		if m := w.Metrics(); m != nil {
			waiting, running, kv := m.Waiting, m.Running, m.KVUsage
			age := now.Sub(m.Scraped).Milliseconds()
			wv.Waiting, wv.Running, wv.KVUsage, wv.MetricsAgeMS = &waiting, &running, &kv, &age
			wv.KVBlocks, wv.BlockSize, wv.ServerRestarts = m.NumGPUBlocks, m.BlockSize, m.Restarts
			if m.Engines&^1 != 0 { // an engine besides engine 0
				wv.Engines = m.Engines.List()
			}
			if s := m.Served; s != nil {
				wv.Models = append(wv.Models, s.Bases...)
				for _, a := range s.Adapters {
					wv.Models = append(wv.Models, a.Name+" ("+a.Parent+")")
				}
			}
			if l := m.LoRA; l != nil {
				wv.LoRAAdapters, wv.MaxLoRA = l.Active, l.Max
			}
		}
		if c := w.Calibration(); c != nil {
			wv.Calibration = calibrationView(c)
		}
		if f := w.LatencyFactors(); f != nil {
			wv.Latency = &LatencyView{TTFTFactor: f.TTFT, TTFTSamples: f.TTFTSamples, TPOTFactor: f.TPOT, TPOTSamples: f.TPOTSamples}
		}
		if d := w.LeastTPOTObjective(); d > 0 {
			ms := float64(d) / float64(time.Millisecond)
			wv.LeastTPOTObjectiveMS = &ms
		}
		if held != nil {
			n, off := held(w.ID())
			wv.KVEventBlocks, wv.KVEventOffloadedBlocks = &n, &off
		}
		v.Workers = append(v.Workers, wv)
	}
	return v
}

// WorkersHandler serves GET /debug/workers; held may be nil.
func WorkersHandler(reg SyncedWorkers, clk clock.PassiveClock, held HeldBlocks) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(Snapshot(reg, clk.Now(), held))
	})
}
