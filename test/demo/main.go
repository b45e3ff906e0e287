package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func main() {
	runShim()
	os.Exit(execute())
}

// execute parses the configuration and runs the demo; it returns the exit
// code: 2 for a bad configuration, 1 for a failed run.
func execute() int {
	c, err := parseConfig(os.Args[1:], os.Getenv)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	if c.WorkDir, err = filepath.Abs(c.WorkDir); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 2
	}
	// envtest logs through controller-runtime; the demo has its own output.
	ctrllog.SetLogger(logr.Discard())

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if _, err := run(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		return 1
	}
	return 0
}
