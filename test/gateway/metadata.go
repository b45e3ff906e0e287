package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Names of the endpoint-picker protocol.
const (
	// NamespaceLB is the metadata namespace of the destination and served keys.
	NamespaceLB = "envoy.lb"
	// NamespaceSubsetHint is the metadata namespace of the subset hint.
	NamespaceSubsetHint = "envoy.lb.subset_hint"
	// KeyDestination is both the destination header and its metadata key.
	KeyDestination = "x-gateway-destination-endpoint"
	// KeyServed is the response metadata key naming the endpoint that served.
	KeyServed = "x-gateway-destination-endpoint-served"
	// KeySubset is the subset hint's metadata key.
	KeySubset = "x-gateway-destination-endpoint-subset"
	// SubsetHintHeader lets a test set the subset hint of one request: a comma
	// separated ip:port list, sent as the envoy.lb.subset_hint list value (an empty
	// header sends an empty list). The gateway strips it before processing.
	SubsetHintHeader = "x-inferpick-test-subset-hint"
)

// ParseEndpoints reads an override host list, "ip:port[,ip:port...]", the way
// Envoy's override_host policy does: entries that are not an IP literal with a
// port are skipped; an error means no valid entry at all.
func ParseEndpoints(s string) ([]string, error) {
	var out []string
	for _, part := range strings.Split(s, ",") {
		ep, err := parseEndpoint(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		out = append(out, ep)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no valid ip:port in %q", s)
	}
	return out, nil
}

func parseEndpoint(s string) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return "", fmt.Errorf("endpoint %q: %w", s, err)
	}
	addr, err := netip.ParseAddr(host)
	if err != nil || addr.Zone() != "" {
		return "", fmt.Errorf("endpoint %q: host is not an IP address", s)
	}
	if addr.Is6() && !strings.HasPrefix(s, "[") {
		return "", fmt.Errorf("endpoint %q: IPv6 address without brackets", s)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return "", fmt.Errorf("endpoint %q: bad port", s)
	}
	return netip.AddrPortFrom(addr, uint16(p)).String(), nil
}

// destinationValue reads the destination from a metadata value: a string list or a
// list of strings.
func destinationValue(v *structpb.Value) (string, bool) {
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return k.StringValue, true
	case *structpb.Value_ListValue:
		var parts []string
		for _, item := range k.ListValue.GetValues() {
			if s, ok := item.GetKind().(*structpb.Value_StringValue); ok {
				parts = append(parts, s.StringValue)
			}
		}
		return strings.Join(parts, ","), len(parts) > 0
	}
	return "", false
}

var errNoDestination = errors.New("no destination in metadata or header")

// destination applies the override host sources in order: metadata, then
// header; with headerOnly the header alone.
func destination(lb *structpb.Struct, h *headerList, headerOnly bool) ([]string, error) {
	if v, ok := lb.GetFields()[KeyDestination]; ok && !headerOnly {
		if s, ok := destinationValue(v); ok {
			return ParseEndpoints(s)
		}
	}
	if vals := h.values(KeyDestination); len(vals) > 0 {
		return ParseEndpoints(vals[0])
	}
	return nil, errNoDestination
}

// requestMetadata is the metadata_context of the request direction.
func requestMetadata(hint []string, hinted bool, lb *structpb.Struct) *corev3.Metadata {
	md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{}}
	if hinted {
		list := make([]*structpb.Value, 0, len(hint))
		for _, ep := range hint {
			list = append(list, structpb.NewStringValue(ep))
		}
		md.FilterMetadata[NamespaceSubsetHint] = &structpb.Struct{Fields: map[string]*structpb.Value{
			KeySubset: structpb.NewListValue(&structpb.ListValue{Values: list}),
		}}
	}
	if len(lb.GetFields()) > 0 {
		md.FilterMetadata[NamespaceLB] = lb
	}
	return md
}

// withServed copies the envoy.lb namespace and adds the served endpoint.
func withServed(lb *structpb.Struct, served string) *structpb.Struct {
	out := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for k, v := range lb.GetFields() {
		out.Fields[k] = v
	}
	if served != "" {
		out.Fields[KeyServed] = structpb.NewStringValue(served)
	}
	return out
}

// splitHint reads the SubsetHintHeader value.
func splitHint(v string) []string {
	out := []string{}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
