// Package app wires the simulator together: command-line options, the
// engine loop and the HTTP server, from start to a clean stop.
package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/server"
)

// Options are the simulator's settings.
type Options struct {
	// KVEvents is --kv-events-config: where KV-cache events are published.
	KVEvents KVEventsConfig
	// KVEventsWhen is --kv-events-when: when a step's events go out,
	// EventsAtStepEnd or EventsWhenScheduled.
	KVEventsWhen string
	Host         string
	Port         int
	// GRPCPort is --grpc-port: where the VllmEngine gRPC API is served
	// (0 picks a free port); NoGRPC, the default, serves none.
	GRPCPort         int
	Model            string
	BlockSize        int
	NumGPUBlocks     int
	MaxNumSeqs       int
	MaxBatchedTokens int
	PrefillUsPerTok  float64
	DecodeMsPerTok   float64
	StepOverheadMs   float64
	// OffloadBlocks and OffloadLoadUsPerTok are --kv-offloading-blocks and
	// --kv-offloading-load-us-per-token: an offloading tier behind the GPU
	// pool and what loading a token back from it costs.
	OffloadBlocks       int
	OffloadLoadUsPerTok float64
	// TransferUsPerBlock is --kv-transfer-us-per-block: what pulling one
	// KV block from a prefill pod costs. PrefillTimeout is
	// --prefill-timeout: how long the prefill pod a request names in
	// x-prefiller-host-port may take.
	TransferUsPerBlock float64
	PrefillTimeout     time.Duration
	// SlidingWindow is --hybrid-sliding-window: events of a hybrid model
	// whose second group of layers attends to that many tokens.
	SlidingWindow    int
	TimeScale        float64
	Seed             uint64
	DefaultMaxTokens int
	MaxTokensCap     int
	Faults           faults.Config
	// ServedModelNames replace Model as the names the base model answers
	// to when set (the first one is echoed and labels the metrics).
	ServedModelNames []string
	// EnableLoRA serves LoRA adapters; LoRAModules enable it too.
	EnableLoRA  bool
	MaxLoRAs    int
	MaxCPULoRAs int
	LoRALoadMs  float64
	LoRAModules []server.LoRAModule
	// DataParallelSize is how many engines the deployment runs, as vLLM's
	// --data-parallel-size; with its internal load balancer all of them
	// serve behind the one port.
	DataParallelSize int
	// DataParallelSizeLocal, when set, is how many of them serve behind
	// this port (vLLM's --data-parallel-size-local, a node's share with its
	// hybrid load balancer), and DataParallelStartRank the rank of the
	// first (--data-parallel-start-rank).
	DataParallelSizeLocal int
	DataParallelStartRank int
	// DataParallelRankPorts, when above 1, plays llm-d's routing sidecar
	// on this port for that many ranks, each served on a port of its own:
	// this one and the ports after it (server.DataParallelSidecar).
	DataParallelRankPorts int
}

// NoGRPC is the --grpc-port that serves no gRPC API.
const NoGRPC = -1

// When a step's KV-cache events are published (--kv-events-when).
const (
	// EventsAtStepEnd publishes them once the step has run, as current
	// vLLM does (from update_from_output).
	EventsAtStepEnd = "step-end"
	// EventsWhenScheduled publishes them as the step is scheduled, as vLLM
	// releases did that published from schedule().
	EventsWhenScheduled = "scheduled"
)

// engines returns how many engines serve behind the port.
func (o *Options) engines() int {
	if o.DataParallelSizeLocal > 0 {
		return o.DataParallelSizeLocal
	}
	return max(o.DataParallelSize-o.DataParallelStartRank, 1)
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	ec := engine.DefaultConfig()
	return &Options{
		Host:             "127.0.0.1",
		Port:             8000,
		GRPCPort:         NoGRPC,
		Model:            "sim-model",
		BlockSize:        ec.BlockSize,
		NumGPUBlocks:     ec.NumGPUBlocks,
		MaxNumSeqs:       ec.MaxNumSeqs,
		MaxBatchedTokens: ec.MaxBatchedTokens,
		PrefillUsPerTok:  float64(ec.PrefillPerToken) / float64(time.Microsecond),
		DecodeMsPerTok:   float64(ec.DecodePerToken) / float64(time.Millisecond),
		StepOverheadMs:   float64(ec.StepOverhead) / float64(time.Millisecond),
		TimeScale:        1,
		Seed:             1,
		DefaultMaxTokens: 16,
		MaxTokensCap:     4096,
		Faults:           faults.None(),
		MaxLoRAs:         1,
		LoRALoadMs:       float64(DefaultLoRALoad) / float64(time.Millisecond),
		DataParallelSize: 1,
		KVEventsWhen:     EventsAtStepEnd,

		OffloadLoadUsPerTok: float64(DefaultOffloadLoad) / float64(time.Microsecond),
		TransferUsPerBlock:  float64(DefaultTransfer) / float64(time.Microsecond),
		PrefillTimeout:      server.DefaultPrefillTimeout,
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on (a loopback address such as 127.0.0.7 is fine)")
	fs.IntVar(&o.Port, "port", o.Port, "port to listen on; 0 picks a free one")
	fs.IntVar(&o.GRPCPort, "grpc-port", o.GRPCPort, "port of vLLM's gRPC engine API (service vllm.grpc.engine.VllmEngine, what vLLM's gRPC entrypoint serves on its --port), HTTP/2 cleartext, beside the HTTP API and its /metrics on --port; 0 picks a free one, -1 serves none")
	fs.StringVar(&o.Model, "model", o.Model, "the model; also its served name unless --served-model-name is given")
	fs.Func("served-model-name", "names the base model answers to, comma-separated or repeated; the first is echoed in responses and labels the metrics",
		func(v string) error {
			for n := range strings.SplitSeq(v, ",") {
				if n = strings.TrimSpace(n); n != "" {
					o.ServedModelNames = append(o.ServedModelNames, n)
				}
			}
			return nil
		})
	fs.BoolVar(&o.EnableLoRA, "enable-lora", o.EnableLoRA, "serve LoRA adapters (implied by --lora-modules)")
	fs.IntVar(&o.MaxLoRAs, "max-loras", o.MaxLoRAs, "most distinct LoRA adapters in one batch")
	fs.IntVar(&o.MaxCPULoRAs, "max-cpu-loras", o.MaxCPULoRAs, "LoRA adapters kept loaded, least recently used evicted first (0: --max-loras)")
	fs.Float64Var(&o.LoRALoadMs, "lora-load-ms", o.LoRALoadMs, "simulated milliseconds to load an adapter that is not loaded; the whole batch waits")
	fs.Func("lora-modules", "adapters registered at start: name=path entries separated by spaces, or a JSON object {\"name\",\"path\",\"base_model_name\"}; repeatable",
		func(v string) error {
			entries := strings.Fields(v)
			if strings.HasPrefix(strings.TrimSpace(v), "{") {
				entries = []string{v}
			}
			for _, e := range entries {
				m, err := server.ParseLoRAModule(e)
				if err != nil {
					return err
				}
				o.LoRAModules = append(o.LoRAModules, m)
			}
			return nil
		})
	fs.Func("kv-events-config", `vLLM's KV-cache events configuration, JSON: {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "topic": "", "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000}; the endpoint is bound when it holds * or :: and connected to otherwise (as vLLM does; reconnecting whenever the connection ends), the replay endpoint is bound, a bound endpoint's host * is --host and port 0 picks a free one; each engine keeps its last buffer_steps batches and replays them on the replay endpoint (off when it is empty); vLLM's other keys are ignored`,
		func(v string) (err error) {
			o.KVEvents, err = parseKVEventsConfig(v)
			return err
		})
	fs.StringVar(&o.KVEventsWhen, "kv-events-when", o.KVEventsWhen, `when a step's KV events are published: "step-end", once the step has run (current vLLM), or "scheduled", as it starts (vLLM releases that published from the scheduler's schedule())`)
	fs.IntVar(&o.DataParallelSize, "data-parallel-size", o.DataParallelSize, "engines of the deployment, behind the one port unless --data-parallel-size-local says fewer; each request goes to the least loaded (waiting x 4 + running); the engine of rank r publishes its KV events on the endpoint's port plus r and labels its metrics engine=\"r\"")
	fs.IntVar(&o.DataParallelSizeLocal, "data-parallel-size-local", o.DataParallelSizeLocal, "engines behind this port (a node's share of --data-parallel-size); 0 means all from the start rank on")
	fs.IntVar(&o.DataParallelStartRank, "data-parallel-start-rank", o.DataParallelStartRank, "data-parallel rank of the first engine behind this port")
	fs.IntVar(&o.DataParallelRankPorts, "data-parallel-rank-ports", o.DataParallelRankPorts, "play llm-d's routing sidecar on --port, the pod's primary port, for this many data-parallel ranks each on a port of its own (vLLM's --data-parallel-external-lb: another vllm-sim per rank): --port is rank 0's and rank r's is --port plus r; a request whose x-data-parallel-host-port names --host and one of them is served there, one naming any other address is answered 400 (0 or 1: off)")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per KV block")
	fs.IntVar(&o.NumGPUBlocks, "num-gpu-blocks", o.NumGPUBlocks, "KV blocks in the pool")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "maximum running sequences")
	fs.IntVar(&o.MaxBatchedTokens, "max-num-batched-tokens", o.MaxBatchedTokens, "token budget of one step (decode plus prefill chunks)")
	fs.Float64Var(&o.PrefillUsPerTok, "prefill-us-per-token", o.PrefillUsPerTok, "simulated microseconds to prefill one uncached prompt token")
	fs.Float64Var(&o.DecodeMsPerTok, "decode-ms-per-token", o.DecodeMsPerTok, "simulated milliseconds of a decode step (one token per running sequence)")
	fs.IntVar(&o.OffloadBlocks, "kv-offloading-blocks", o.OffloadBlocks, `KV blocks of an offloading tier behind the GPU pool, as vLLM's OffloadingConnector keeps in CPU memory (--kv-offloading-size): a prompt's blocks are copied to it once computed, least recently used evicted first, and loaded back instead of computed again; its events name medium "CPU" (0: no tier)`)
	fs.Float64Var(&o.OffloadLoadUsPerTok, "kv-offloading-load-us-per-token", o.OffloadLoadUsPerTok, "simulated microseconds to load one prompt token's KV back from the offloading tier, spent in the step that admits the request")
	fs.Float64Var(&o.TransferUsPerBlock, "kv-transfer-us-per-block", o.TransferUsPerBlock, "simulated microseconds to pull one KV block of a prompt the prefill pod named in x-prefiller-host-port computed, spent in the step that admits the request")
	fs.DurationVar(&o.PrefillTimeout, "prefill-timeout", o.PrefillTimeout, "how long the prefill pod named in x-prefiller-host-port may take before the request is served here without it")
	fs.IntVar(&o.SlidingWindow, "hybrid-sliding-window", o.SlidingWindow, `publish KV events as a hybrid model does whose second group of layers attends to the last N tokens (gpt-oss, Gemma 3): every block stored in group 0 ("full_attention") and group 1 ("sliding_window"), and a computed prompt's blocks before its last N tokens removed from group 1; prefix hits follow group 0 (0: one group, events without group_idx)`)
	fs.Float64Var(&o.StepOverheadMs, "step-overhead-ms", o.StepOverheadMs, "simulated fixed milliseconds of every step")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "wall time per simulated time (0.01 runs 100x faster, 0 does not wait)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the fault dice")
	fs.IntVar(&o.DefaultMaxTokens, "default-max-tokens", o.DefaultMaxTokens, "output tokens when a request sets no limit")
	fs.IntVar(&o.MaxTokensCap, "max-tokens-cap", o.MaxTokensCap, "upper bound on any request's output tokens")
	fs.Float64Var(&o.Faults.ErrorRate, "fault-error-rate", o.Faults.ErrorRate, "fraction of completion requests answered with --fault-error-status")
	fs.IntVar(&o.Faults.ErrorStatus, "fault-error-status", o.Faults.ErrorStatus, "HTTP status of injected errors")
	fs.IntVar(&o.Faults.StallAfterChunks, "fault-stall-after-chunks", o.Faults.StallAfterChunks, "stop a stream after this many events and hold it open (-1 off)")
	fs.IntVar(&o.Faults.DropAfterChunks, "fault-drop-after-chunks", o.Faults.DropAfterChunks, "close the connection after this many events (-1 off)")
	fs.IntVar(&o.Faults.GRPCErrorAfterChunks, "fault-grpc-error-after-chunks", o.Faults.GRPCErrorAfterChunks, "end a streamed gRPC Generate call with status INTERNAL in its trailers after this many chunks (-1 off)")
	fs.IntVar(&o.Faults.MetricsDelayMs, "fault-metrics-delay-ms", o.Faults.MetricsDelayMs, "delay every /metrics answer (milliseconds)")
	fs.BoolVar(&o.Faults.MetricsGarbage, "fault-metrics-garbage", o.Faults.MetricsGarbage, "answer /metrics with text that does not parse")
}

// maxEngines bounds --data-parallel-size, as the picker follows the
// engines of ranks below 64.
const maxEngines = 64

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if ip := net.ParseIP(o.Host); ip == nil && o.Host != "localhost" {
		errs = append(errs, fmt.Errorf("--host %q is not an IP address", o.Host))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d out of range", o.Port))
	}
	if o.GRPCPort < NoGRPC || o.GRPCPort > 65535 {
		errs = append(errs, fmt.Errorf("--grpc-port %d out of range", o.GRPCPort))
	}
	if o.Model == "" {
		errs = append(errs, errors.New("--model must not be empty"))
	}
	served := o.ServedModelNames
	if len(served) == 0 {
		served = []string{o.Model}
	}
	for _, m := range o.LoRAModules {
		if m.Base != "" && !slices.Contains(served, m.Base) {
			errs = append(errs, fmt.Errorf("--lora-modules %s: base model %q is not a served model name", m.Name, m.Base))
		}
	}
	if o.loraEnabled() && o.MaxLoRAs < 1 {
		errs = append(errs, fmt.Errorf("--max-loras %d must be at least 1 with LoRA enabled", o.MaxLoRAs))
	}
	if o.TimeScale < 0 || o.PrefillUsPerTok < 0 || o.DecodeMsPerTok < 0 || o.StepOverheadMs < 0 || o.LoRALoadMs < 0 || o.OffloadLoadUsPerTok < 0 || o.TransferUsPerBlock < 0 {
		errs = append(errs, errors.New("times and --time-scale must not be negative"))
	}
	if o.PrefillTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--prefill-timeout %v must be positive", o.PrefillTimeout))
	}
	if o.KVEventsWhen != EventsAtStepEnd && o.KVEventsWhen != EventsWhenScheduled {
		errs = append(errs, fmt.Errorf("--kv-events-when %q: want %q or %q", o.KVEventsWhen, EventsAtStepEnd, EventsWhenScheduled))
	}
	if o.DataParallelSize < 1 || o.DataParallelSize > maxEngines {
		errs = append(errs, fmt.Errorf("--data-parallel-size %d out of range [1, %d]", o.DataParallelSize, maxEngines))
	}
	if o.DataParallelStartRank < 0 || o.DataParallelSizeLocal < 0 || o.DataParallelStartRank+o.engines() > o.DataParallelSize {
		errs = append(errs, fmt.Errorf("--data-parallel-start-rank %d and --data-parallel-size-local %d: the ranks behind the port must lie in [0, --data-parallel-size %d)",
			o.DataParallelStartRank, o.DataParallelSizeLocal, o.DataParallelSize))
	}
	if o.DataParallelRankPorts < 0 || o.DataParallelRankPorts > maxEngines || o.DataParallelRankPorts > 1 && o.Port == 0 {
		errs = append(errs, fmt.Errorf("--data-parallel-rank-ports %d must lie in [0, %d], with a --port other than 0", o.DataParallelRankPorts, maxEngines))
	}
	if o.DefaultMaxTokens < 1 || o.MaxTokensCap < 1 {
		errs = append(errs, errors.New("--default-max-tokens and --max-tokens-cap must be at least 1"))
	}
	if err := o.engineConfig().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.Faults.Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := o.KVEvents.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// DefaultLoRALoad is the simulated time to load a LoRA adapter: reading a
// rank-16 adapter of a 7-8B model (tens of MB of safetensors) and moving it
// to the GPU takes vLLM a few hundred milliseconds.
const DefaultLoRALoad = 250 * time.Millisecond

// DefaultOffloadLoad is the simulated time to load one prompt token's KV
// back from host memory: a 7-8B model with grouped-query attention keeps
// about 128 KiB of KV a token, and a PCIe 4.0 x16 link moves about 25 GB/s.
const DefaultOffloadLoad = 5 * time.Microsecond

// DefaultTransfer is the simulated time to pull one KV block of 16 tokens
// from a prefill pod: about 2 MiB of a 7-8B model's KV over a 200 Gb/s
// RDMA link, as NIXL moves it.
const DefaultTransfer = 80 * time.Microsecond

func (o *Options) loraEnabled() bool { return o.EnableLoRA || len(o.LoRAModules) > 0 }

func (o *Options) engineConfig() engine.Config {
	maxLoRAs, maxCPU := 0, 0
	if o.loraEnabled() {
		maxLoRAs, maxCPU = o.MaxLoRAs, o.MaxCPULoRAs
	}
	return engine.Config{
		MaxLoRAs:         maxLoRAs,
		MaxCPULoRAs:      maxCPU,
		LoRALoadCost:     time.Duration(o.LoRALoadMs * float64(time.Millisecond)),
		BlockSize:        o.BlockSize,
		NumGPUBlocks:     o.NumGPUBlocks,
		MaxNumSeqs:       o.MaxNumSeqs,
		MaxBatchedTokens: o.MaxBatchedTokens,
		PrefillPerToken:  time.Duration(o.PrefillUsPerTok * float64(time.Microsecond)),
		DecodePerToken:   time.Duration(o.DecodeMsPerTok * float64(time.Millisecond)),
		StepOverhead:     time.Duration(o.StepOverheadMs * float64(time.Millisecond)),

		OffloadBlocks:       o.OffloadBlocks,
		SlidingWindow:       o.SlidingWindow,
		OffloadLoadPerToken: time.Duration(o.OffloadLoadUsPerTok * float64(time.Microsecond)),
		TransferPerBlock:    time.Duration(o.TransferUsPerBlock * float64(time.Microsecond)),
	}
}
