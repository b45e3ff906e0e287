// Package fileconfig reads the configuration given with --config-file or
// --config-text: inferpick's own document (a `policy:` block and an
// `attributes:` list) or the upstream endpoint picker's
// EndpointPickerConfig, translated onto inferpick's policies. Errors name the line they are about.
package fileconfig

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/attrexpr"
	"github.com/inferpick/inferpick/picker/policy"
)

// File is what a configuration document sets.
type File struct {
	// Policy is the routing policy, not yet defaulted.
	Policy policy.Config
	// MetricsPath, when not empty, is the model servers' metrics path the
	// document asks for.
	MetricsPath string
	// KVEventsPort, when not 0, is the port of the model servers' KV-cache
	// events the document subscribes to, and KVEventsTopic the prefix of
	// their topics (llm-d's precise-prefix-cache-scorer). KVEventsListen,
	// when not empty, is the address (":PORT") where the picker takes the
	// events of servers that connect to it (kvEventsConfig.zmqEndpoint).
	KVEventsPort   int
	KVEventsTopic  string
	KVEventsListen string
	// MaxEndpoints, when not 0, is how many endpoints the destination
	// header lists, the primary and its fallbacks (the max-score picker's
	// maxNumOfEndpoints).
	MaxEndpoints int
	// ModelServerType, when not empty, is the kind of model server whose
	// metric names are read (core-metrics-extractor's defaultEngine).
	ModelServerType string
	// Attributes are what is reported to the gateway at the end of each
	// response (the native document's attributes, or upstream's
	// request-attribute-reporter plugins), in the order of the document.
	Attributes []attrexpr.Attribute
	// FlowControl is what featureGates and the flowControl section ask of
	// the flow-control queue.
	FlowControl FlowControl
	// Warnings name what the document asks for that has no effect here,
	// one sentence each, to be logged once at start.
	Warnings []string
}

// native is inferpick's own document.
type native struct {
	Policy policy.Config `yaml:"policy"`
	// Attributes is read by readAttributes, which names the lines of its
	// errors.
	Attributes yaml.Node `yaml:"attributes"`
}

// Parse reads one YAML document. A document whose kind is
// EndpointPickerConfig is translated (see docs/policy.md); any other is read
// as inferpick's own, strictly: an unknown field is an error.
func Parse(data []byte) (File, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return File{}, fmt.Errorf("parse: %w", err)
	}
	if root.Kind == 0 || len(root.Content) == 0 {
		return File{}, nil // an empty document sets nothing
	}
	doc := root.Content[0]
	if doc.Kind != yaml.MappingNode {
		return File{}, fmt.Errorf("line %d: the document must be a mapping", doc.Line)
	}
	if kind := lookup(doc, "kind"); kind != nil {
		if kind.Value != endpointPickerKind {
			return File{}, fmt.Errorf("line %d: kind %q is not supported: use %s or inferpick's own document with a policy block", kind.Line, kind.Value, endpointPickerKind)
		}
		return fromUpstream(doc)
	}
	var n native
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&n); err != nil && !errors.Is(err, io.EOF) {
		return File{}, fmt.Errorf("parse: %w", err)
	}
	attrs, err := readAttributes(&n.Attributes)
	if err != nil {
		return File{}, err
	}
	return File{Policy: n.Policy, Attributes: attrs}, nil
}

// lookup returns the value of key in the mapping m, or nil.
func lookup(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}
