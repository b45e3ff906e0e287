package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/inferpick/inferpick/test/gateway"
)

func parse(t *testing.T, args ...string) *options {
	t.Helper()
	var o options
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	o.addFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

func TestHealthCheckFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string // part of the error, "" for none
	}{
		"none":              {},
		"one per picker":    {args: []string{"--picker", "127.0.0.1:1,127.0.0.1:2", "--picker-health", "127.0.0.1:1,127.0.0.1:2"}},
		"one missing":       {args: []string{"--picker", "127.0.0.1:1,127.0.0.1:2", "--picker-health", "127.0.0.1:3"}, want: "1 addresses for 2"},
		"no interval":       {args: []string{"--picker-health", "127.0.0.1:3", "--health-check-interval", "0s"}, want: "--health-check-interval"},
		"interval unneeded": {args: []string{"--health-check-interval", "0s"}},
		"no timeout":        {args: []string{"--picker-health", "127.0.0.1:3", "--health-check-timeout", "0s"}, want: "--health-check-timeout"},
	} {
		t.Run(name, func(t *testing.T) {
			o := parse(t, tc.args...)
			err := o.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("validate: %v, want an error naming %q", err, tc.want)
			case tc.want != "":
				return
			}
			opts, err := o.gatewayOptions()
			if err != nil {
				t.Fatal(err)
			}
			// With health addresses the pickers count as unhealthy until a
			// check passes, and none can here: nothing listens there.
			g, err := gateway.NewCluster(strings.Split(o.picker, ","), opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = g.Close() }()
			for addr, healthy := range g.PickersHealthy() {
				if healthy == (o.pickerHealth != "") {
					t.Errorf("picker %s healthy %v, with --picker-health %q", addr, healthy, o.pickerHealth)
				}
			}
		})
	}
}
