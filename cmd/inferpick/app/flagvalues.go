package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/inferpick/inferpick/picker/portnum"
)

// byteSize is a size flag written as a Kubernetes quantity with an optional
// trailing B: 4194304, 4Mi, 10MiB, 25MB.
type byteSize struct {
	n   int
	raw string
}

func (b *byteSize) String() string { return b.raw }

func (b *byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	b.n, b.raw = n, s
	return nil
}

func parseSize(s string) (int, error) {
	t := strings.TrimSpace(s)
	if len(t) > 1 && (t[len(t)-1] == 'B' || t[len(t)-1] == 'b') {
		t = t[:len(t)-1]
	}
	q, err := resource.ParseQuantity(t)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	v, ok := q.AsInt64()
	if !ok || v < 0 || v > math.MaxInt32 {
		return 0, fmt.Errorf("size %q must be a whole number of bytes from 0 to 2Gi", s)
	}
	return int(v), nil
}

// portList is a comma-separated list of ports, duplicates dropped. A
// repeated flag adds to the list.
type portList []int

func (p *portList) String() string {
	parts := make([]string, len(*p))
	for i, v := range *p {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (p *portList) Set(s string) error {
	out := *p
	for f := range strings.SplitSeq(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		n, err := portnum.Parse(f)
		if err != nil {
			return err
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	*p = out
	return nil
}

var tlsVersions = map[string]uint16{
	"VersionTLS10": tls.VersionTLS10,
	"VersionTLS11": tls.VersionTLS11,
	"VersionTLS12": tls.VersionTLS12,
	"VersionTLS13": tls.VersionTLS13,
}

// parseTLSVersion reads a crypto/tls constant name; "" is TLS 1.2.
func parseTLSVersion(s string) (uint16, error) {
	if s == "" {
		return tls.VersionTLS12, nil
	}
	v, ok := tlsVersions[s]
	if !ok {
		return 0, fmt.Errorf("%q is not one of VersionTLS10, VersionTLS11, VersionTLS12, VersionTLS13", s)
	}
	return v, nil
}

// parseCipherSuites reads comma-separated crypto/tls cipher suite names.
func parseCipherSuites(s string) ([]uint16, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	ids := map[string]uint16{}
	for _, cs := range tls.CipherSuites() {
		ids[cs.Name] = cs.ID
	}
	for _, cs := range tls.InsecureCipherSuites() {
		ids[cs.Name] = cs.ID
	}
	var out []uint16
	var errs []error
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		id, ok := ids[name]
		if !ok {
			errs = append(errs, fmt.Errorf("unknown cipher suite %q", name))
			continue
		}
		out = append(out, id)
	}
	return out, errors.Join(errs...)
}
