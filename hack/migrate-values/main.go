// Command migrate-values turns a values file of the upstream inferencepool
// chart (Gateway API Inference Extension v1.5.0, also as llm-d deploys it)
// into values for the inferpick chart, listing what it could not carry over.
//
//	go run ./hack/migrate-values upstream-values.yaml > inferpick-values.yaml
//	go run ./hack/migrate-values < upstream-values.yaml
//
// The notes go to stderr and, as comments, to the top of the output.
// docs/migrating.md has the key-by-key table.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "migrate-values:", err)
		os.Exit(1)
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	in := stdin
	switch len(args) {
	case 0:
	case 1:
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		in = f
	default:
		return fmt.Errorf("usage: migrate-values [upstream-values.yaml]")
	}
	data, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	out, notes, err := Convert(data)
	if err != nil {
		return err
	}
	for _, n := range notes {
		fmt.Fprintln(stderr, "note:", n)
	}
	_, err = stdout.Write(out)
	return err
}
