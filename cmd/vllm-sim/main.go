// Command vllm-sim is a vLLM stand-in for tests, the demo and benchmarks: an
// OpenAI-compatible server with vLLM's metrics whose latencies follow a KV
// prefix-cache and scheduler model, so routing quality shows in TTFT.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/inferpick/inferpick/cmd/internal/version"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/app"
)

func main() {
	os.Exit(run())
}

// run parses the flags and serves until SIGTERM or an interrupt. It returns
// the exit code: 2 for bad flags, 1 when the server fails.
func run() int {
	opts := app.NewOptions()
	opts.AddFlags(flag.CommandLine)
	printVersion := flag.Bool("version", false, "Print the version and source revision, then exit.")
	flag.Parse()
	if *printVersion {
		fmt.Println(version.String("vllm-sim"))
		return 0
	}
	if err := opts.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := app.Run(ctx, opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "vllm-sim:", err)
		return 1
	}
	return 0
}
