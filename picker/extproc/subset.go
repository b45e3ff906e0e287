package extproc

import (
	"net/netip"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/inferpick/inferpick/picker/registry"
)

// subset is the gateway's restriction of the candidates: entries "ip" (any
// port) or "ip:port".
type subset struct {
	present bool
	addrs   []netip.Addr
	exact   []netip.AddrPort
}

// readSubset reads envoy.lb.subset_hint from the request metadata. The
// value is a list of strings or one comma-separated string; entries that do
// not parse are ignored (and so cannot widen the set).
func readSubset(md *corev3.Metadata) subset {
	ns, ok := md.GetFilterMetadata()[subsetNamespace]
	if !ok {
		return subset{}
	}
	v, ok := ns.GetFields()[SubsetKey]
	if !ok {
		return subset{}
	}
	s := subset{present: true}
	switch k := v.GetKind().(type) {
	case *structpb.Value_StringValue:
		for e := range strings.SplitSeq(k.StringValue, ",") {
			s.add(e)
		}
	case *structpb.Value_ListValue:
		for _, e := range k.ListValue.GetValues() {
			for p := range strings.SplitSeq(e.GetStringValue(), ",") {
				s.add(p)
			}
		}
	}
	return s
}

func (s *subset) add(e string) {
	e = strings.TrimSpace(e)
	if e == "" {
		return
	}
	if ap, err := netip.ParseAddrPort(e); err == nil {
		s.exact = append(s.exact, ap)
		return
	}
	if a, err := netip.ParseAddr(e); err == nil {
		s.addrs = append(s.addrs, a)
	}
}

// String lists the hint's entries, as a key of the endpoints it allows.
func (s *subset) String() string {
	var b strings.Builder
	for _, e := range s.exact {
		b.WriteString(e.String())
		b.WriteByte(',')
	}
	for _, a := range s.addrs {
		b.WriteString(a.String())
		b.WriteByte(',')
	}
	return b.String()
}

// appendAllowed appends to dst the workers of ws the hint allows.
func (s *subset) appendAllowed(dst, ws []*registry.Worker) []*registry.Worker {
	for _, w := range ws {
		if s.allows(w.Endpoint().Address) {
			dst = append(dst, w)
		}
	}
	return dst
}

func (s *subset) allows(ap netip.AddrPort) bool {
	for _, e := range s.exact {
		if e == ap {
			return true
		}
	}
	for _, a := range s.addrs {
		if a == ap.Addr() {
			return true
		}
	}
	return false
}
