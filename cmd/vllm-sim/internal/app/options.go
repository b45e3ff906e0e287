// Package app wires the simulator together: command-line options, the
// engine loop and the HTTP server, from start to a clean stop.
package app

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
)

// Options are the simulator's settings.
type Options struct {
	Host             string
	Port             int
	Model            string
	BlockSize        int
	NumGPUBlocks     int
	MaxNumSeqs       int
	MaxBatchedTokens int
	PrefillUsPerTok  float64
	DecodeMsPerTok   float64
	StepOverheadMs   float64
	TimeScale        float64
	Seed             uint64
	DefaultMaxTokens int
	MaxTokensCap     int
	Faults           faults.Config
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	ec := engine.DefaultConfig()
	return &Options{
		Host:             "127.0.0.1",
		Port:             8000,
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
	}
}

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Host, "host", o.Host, "address to listen on (a loopback address such as 127.0.0.7 is fine)")
	fs.IntVar(&o.Port, "port", o.Port, "port to listen on; 0 picks a free one")
	fs.StringVar(&o.Model, "model", o.Model, "served model name")
	fs.IntVar(&o.BlockSize, "block-size", o.BlockSize, "tokens per KV block")
	fs.IntVar(&o.NumGPUBlocks, "num-gpu-blocks", o.NumGPUBlocks, "KV blocks in the pool")
	fs.IntVar(&o.MaxNumSeqs, "max-num-seqs", o.MaxNumSeqs, "maximum running sequences")
	fs.IntVar(&o.MaxBatchedTokens, "max-num-batched-tokens", o.MaxBatchedTokens, "token budget of one step (decode plus prefill chunks)")
	fs.Float64Var(&o.PrefillUsPerTok, "prefill-us-per-token", o.PrefillUsPerTok, "simulated microseconds to prefill one uncached prompt token")
	fs.Float64Var(&o.DecodeMsPerTok, "decode-ms-per-token", o.DecodeMsPerTok, "simulated milliseconds of a decode step (one token per running sequence)")
	fs.Float64Var(&o.StepOverheadMs, "step-overhead-ms", o.StepOverheadMs, "simulated fixed milliseconds of every step")
	fs.Float64Var(&o.TimeScale, "time-scale", o.TimeScale, "wall time per simulated time (0.01 runs 100x faster, 0 does not wait)")
	fs.Uint64Var(&o.Seed, "seed", o.Seed, "seed of the fault dice")
	fs.IntVar(&o.DefaultMaxTokens, "default-max-tokens", o.DefaultMaxTokens, "output tokens when a request sets no limit")
	fs.IntVar(&o.MaxTokensCap, "max-tokens-cap", o.MaxTokensCap, "upper bound on any request's output tokens")
	fs.Float64Var(&o.Faults.ErrorRate, "fault-error-rate", o.Faults.ErrorRate, "fraction of completion requests answered with --fault-error-status")
	fs.IntVar(&o.Faults.ErrorStatus, "fault-error-status", o.Faults.ErrorStatus, "HTTP status of injected errors")
	fs.IntVar(&o.Faults.StallAfterChunks, "fault-stall-after-chunks", o.Faults.StallAfterChunks, "stop a stream after this many events and hold it open (-1 off)")
	fs.IntVar(&o.Faults.DropAfterChunks, "fault-drop-after-chunks", o.Faults.DropAfterChunks, "close the connection after this many events (-1 off)")
	fs.IntVar(&o.Faults.MetricsDelayMs, "fault-metrics-delay-ms", o.Faults.MetricsDelayMs, "delay every /metrics answer (milliseconds)")
	fs.BoolVar(&o.Faults.MetricsGarbage, "fault-metrics-garbage", o.Faults.MetricsGarbage, "answer /metrics with text that does not parse")
}

// Validate reports every invalid option.
func (o *Options) Validate() error {
	var errs []error
	if ip := net.ParseIP(o.Host); ip == nil && o.Host != "localhost" {
		errs = append(errs, fmt.Errorf("--host %q is not an IP address", o.Host))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("--port %d out of range", o.Port))
	}
	if o.Model == "" {
		errs = append(errs, errors.New("--model must not be empty"))
	}
	if o.TimeScale < 0 || o.PrefillUsPerTok < 0 || o.DecodeMsPerTok < 0 || o.StepOverheadMs < 0 {
		errs = append(errs, errors.New("times and --time-scale must not be negative"))
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
	return errors.Join(errs...)
}

func (o *Options) engineConfig() engine.Config {
	return engine.Config{
		BlockSize:        o.BlockSize,
		NumGPUBlocks:     o.NumGPUBlocks,
		MaxNumSeqs:       o.MaxNumSeqs,
		MaxBatchedTokens: o.MaxBatchedTokens,
		PrefillPerToken:  time.Duration(o.PrefillUsPerTok * float64(time.Microsecond)),
		DecodePerToken:   time.Duration(o.DecodeMsPerTok * float64(time.Millisecond)),
		StepOverhead:     time.Duration(o.StepOverheadMs * float64(time.Millisecond)),
	}
}
