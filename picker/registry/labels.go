package registry

import "strings"

// Labels are the values of the pod labels a policy's label filters read,
// by the place of each label's key in the list of keys the policy names
// (policy.Config.LabelKeys): only those, so that a pod's other labels
// never reach the registry. The zero Labels has none of them, as a static
// endpoint's. Labels are comparable, and an Endpoint with them stays so.
type Labels struct {
	// enc holds one entry a key, in order: the key, then labelAbsent, or
	// labelPresent and the value; each entry ends in labelEnd. Neither a
	// label key nor a label value holds those bytes (the API server
	// accepts [A-Za-z0-9./_-] alone).
	enc string
}

const (
	labelEnd     = '\x00'
	labelPresent = '\x01'
	labelAbsent  = '\x02'
)

// LabelsOf returns the values that podLabels gives keys, in the order of
// keys. A value holding a NUL byte (never one the API server accepts) is
// cut there.
func LabelsOf(keys []string, podLabels map[string]string) Labels {
	if len(keys) == 0 {
		return Labels{}
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(cut(k))
		v, ok := podLabels[k]
		if !ok {
			b.WriteByte(labelAbsent)
			b.WriteByte(labelEnd)
			continue
		}
		b.WriteByte(labelPresent)
		b.WriteString(cut(v))
		b.WriteByte(labelEnd)
	}
	return Labels{enc: b.String()}
}

// cut is s up to its first byte of the encoding's.
func cut(s string) string {
	if i := strings.IndexAny(s, "\x00\x01\x02"); i >= 0 {
		return s[:i]
	}
	return s
}

// next splits the first entry off s: its key, its value and whether the
// label is present, and the rest; ok false when s is empty.
func next(s string) (key, value string, present bool, rest string, ok bool) {
	end := strings.IndexByte(s, labelEnd)
	if end < 0 {
		return "", "", false, "", false
	}
	entry, rest := s[:end], s[end+1:]
	if i := strings.IndexByte(entry, labelPresent); i >= 0 {
		return entry[:i], entry[i+1:], true, rest, true
	}
	return strings.TrimSuffix(entry, string(rune(labelAbsent))), "", false, rest, true
}

// Value returns the value of the i-th key's label, and false when the pod
// has no such label. It reads in place and allocates nothing.
func (l Labels) Value(i int) (string, bool) {
	s := l.enc
	for {
		_, v, present, rest, ok := next(s)
		if !ok {
			return "", false
		}
		if i == 0 {
			return v, present
		}
		s, i = rest, i-1
	}
}

// Equal reports whether l and o hold the same keys and values; go-cmp
// compares Labels by it.
func (l Labels) Equal(o Labels) bool { return l == o }

// Map returns the labels the pod carries of those read, by key; nil when
// it carries none of them.
func (l Labels) Map() map[string]string {
	var m map[string]string
	for s := l.enc; ; {
		k, v, present, rest, ok := next(s)
		if !ok {
			return m
		}
		if present {
			if m == nil {
				m = map[string]string{}
			}
			m[k] = v
		}
		s = rest
	}
}
