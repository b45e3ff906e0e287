package app

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// inert is a flag of the upstream endpoint picker (or llm-d's router) that
// inferpick accepts so their deployments start unchanged, though it changes
// nothing here. effect returns why a given value has no effect, or "" when
// the value asks for what inferpick does anyway.
type inert struct {
	name, usage string
	kind        valueKind
	effect      func(v string) string
}

type valueKind int

const (
	stringValue valueKind = iota
	boolValue
	durationValue
)

// Warning is an accepted flag that has no effect, or works against another
// setting, logged once at start.
type Warning struct {
	Flag   string
	Value  string
	Reason string
	// Message is the log message; empty: warningMessage (no effect).
	Message string
}

// always returns the same reason whatever the value.
func always(reason string) func(string) string { return func(string) string { return reason } }

// unless returns reason except for the values listed, which match
// inferpick's behaviour. Surrounding quotes, which charts sometimes render
// into the value, are ignored.
func unless(reason string, ok ...string) func(string) string {
	return func(v string) string {
		if slices.Contains(ok, strings.Trim(v, `"`)) {
			return ""
		}
		return reason
	}
}

// inertFlags lists every accepted flag without effect; docs/operations.md
// carries the same list.
var inertFlags = []inert{
	{"health-checking", "Accepted for compatibility: the gRPC health service is always served, on --grpc-health-port and on the ext_proc port.", boolValue,
		always("the gRPC health service is always served, on --grpc-health-port and on the ext_proc port")},
	{"enable-cert-reload", "Accepted for compatibility: the --cert-path certificate is always reloaded.", boolValue,
		unless("the certificate in --cert-path is always reloaded when it changes", "true")},
	{"refresh-prometheus-metrics-interval", "Accepted for compatibility: metrics are computed when scraped.", durationValue,
		always("inferpick's own metrics are computed when they are scraped, there is nothing to flush")},
	{"model-server-metrics-scheme", "Accepted for compatibility: model servers are scraped over http.", stringValue,
		unless("model servers are scraped over http only", "http")},
	{"model-server-metrics-https-insecure-skip-verify", "Accepted for compatibility: model servers are scraped over http.", boolValue,
		always("model servers are scraped over http only")},
	{"emit-endpoint-scores", "Accepted for compatibility: per-endpoint scores are not emitted.", boolValue,
		unless("per-endpoint scores are not emitted", "false")},
	{"enable-grpc-stream-metrics", "Accepted for compatibility: ext_proc stream metrics are always exported.", boolValue,
		unless("ext_proc stream metrics are always exported", "true")},
	{"allow-experimental-plugins", "Accepted for compatibility: there are no experimental plugins.", boolValue,
		unless("there are no experimental plugins", "false")},
	{"metrics-client-ca-file", "Accepted for compatibility: the metrics port authenticates with --metrics-endpoint-auth.", stringValue,
		unless("the metrics port does not verify client certificates; it authenticates callers with --metrics-endpoint-auth", "")},
	{"metrics-cert-dir", "Accepted for compatibility: the metrics port's certificate is not configurable.", stringValue,
		unless("the metrics port's serving certificate is not configurable", "")},
}

// inertValue stores an inert flag's value after checking its type.
type inertValue struct {
	kind valueKind
	v    string
}

func (i *inertValue) String() string { return i.v }

func (i *inertValue) Set(s string) error {
	var err error
	switch i.kind {
	case boolValue:
		_, err = strconv.ParseBool(s)
	case durationValue:
		_, err = time.ParseDuration(s)
	}
	if err != nil {
		return fmt.Errorf("parse %q: %w", s, err)
	}
	i.v = s
	return nil
}

// IsBoolFlag lets a boolean flag be given without a value.
func (i *inertValue) IsBoolFlag() bool { return i.kind == boolValue }

func addInertFlags(fs *flag.FlagSet) {
	for _, f := range inertFlags {
		fs.Var(&inertValue{kind: f.kind}, f.name, f.usage)
	}
}

// inertWarnings returns a warning for each inert flag given on the command
// line whose value asks for something inferpick does not do.
func inertWarnings(fs *flag.FlagSet) []Warning {
	var ws []Warning
	fs.Visit(func(fl *flag.Flag) {
		for _, f := range inertFlags {
			if f.name != fl.Name {
				continue
			}
			v := fl.Value.String()
			if r := f.effect(v); r != "" {
				ws = append(ws, Warning{Flag: "--" + f.name, Value: v, Reason: r})
			}
		}
	})
	return ws
}
