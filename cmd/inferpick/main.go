// Command inferpick is an endpoint picker for the Gateway API Inference
// Extension: Envoy's ext_proc filter asks it which model-server pod of an
// InferencePool serves each request.
package main

import (
	"flag"
	"fmt"
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/inferpick/inferpick/cmd/inferpick/app"
	"github.com/inferpick/inferpick/cmd/internal/version"
)

func main() {
	opts, err := app.Parse(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "inferpick:", err)
		os.Exit(2)
	}
	if opts.PrintVersion {
		fmt.Println(version.String("inferpick"))
		return
	}
	if err := app.Run(ctrl.SetupSignalHandler(), opts); err != nil {
		fmt.Fprintln(os.Stderr, "inferpick:", err)
		os.Exit(1)
	}
}
