package scrape

import (
	"errors"
	"fmt"
)

// field is a value of a Report that series feed.
type field uint8

const (
	fieldWaiting field = iota
	fieldRunning
	fieldKVUsage
	fieldCacheInfo
	fieldBlockSize
	fieldNumBlocks
	fieldLoRA
	fieldPromptTokens
	fieldPrefixQueries
	fieldPrefixHits
	fieldTierHits
	fieldPrefillSum
	fieldPrefillCount
	fieldDecodeSum
	fieldDecodeCount
	numFields
)

var fieldNames = [numFields]string{"waiting", "running", "KV usage", "cache info", "block size", "block count", "LoRA",
	"prompt tokens", "prefix-cache queries", "prefix-cache hits", "offloading-tier hits", "prefill time sum", "prefill time count",
	"inter-token latency sum", "inter-token latency count"}

// Bounds of a Schema, which keep the parser's state on the stack.
const (
	maxTargets = 32 // series read, over all fields
	maxMatch   = 8  // label matchers of one series
)

// target is one series the parser reads, with the slot of the parser's
// state it folds into. Slots of a field ascend in the order of its
// alternatives.
type target struct {
	field          field
	slot           uint8
	match          []LabelMatch
	blockSizeLabel string
	numBlocksLabel string
}

// Schema is a compiled Names: what Parse reads from a metrics page.
type Schema struct {
	byName map[string][]target
	first  [256]bool  // first bytes of the names
	lens   uint64     // bit n-1 set: some name has n bytes
	marks  [64]uint64 // bit mark(name) set for each name
	slots  [numFields][]uint8
}

// defaultSchema reads the Auto preset's names.
var defaultSchema = func() *Schema {
	n, err := Preset(Auto)
	if err == nil {
		var s *Schema
		if s, err = NewSchema(n); err == nil {
			return s
		}
	}
	panic(err)
}()

// NewSchema compiles n. It fails on a series without a valid name, with
// an invalid label name or more than 8 matchers, and when n lists no
// series or more than 32 in all.
func NewSchema(n Names) (*Schema, error) {
	s := &Schema{byName: map[string][]target{}}
	var errs []error
	add := func(f field, series Series, t target) {
		if err := checkSeries(series); err != nil {
			errs = append(errs, fmt.Errorf("%s series %q: %w", fieldNames[f], series, err))
			return
		}
		count := 0
		for _, ts := range s.byName {
			count += len(ts)
		}
		if count == maxTargets {
			errs = append(errs, fmt.Errorf("%s series %q: more than %d series in all", fieldNames[f], series, maxTargets))
			return
		}
		t.field, t.slot, t.match = f, uint8(count), series.Labels
		s.byName[series.Name] = append(s.byName[series.Name], t)
		s.slots[f] = append(s.slots[f], t.slot)
		s.first[series.Name[0]] = true
		s.lens |= 1 << (len(series.Name) - 1)
		m := mark([]byte(series.Name))
		s.marks[m/64] |= 1 << (m % 64)
	}
	for f, list := range [...][]Series{fieldWaiting: n.Waiting, fieldRunning: n.Running, fieldKVUsage: n.KVUsage,
		fieldBlockSize: n.BlockSize, fieldNumBlocks: n.NumBlocks, fieldLoRA: n.LoRA,
		fieldPromptTokens: n.PromptTokens, fieldPrefixQueries: n.PrefixQueries, fieldPrefixHits: n.PrefixHits,
		fieldTierHits:   n.TierHits,
		fieldPrefillSum: n.PrefillSum, fieldPrefillCount: n.PrefillCount,
		fieldDecodeSum: n.DecodeSum, fieldDecodeCount: n.DecodeCount} {
		for _, series := range list {
			add(field(f), series, target{})
		}
	}
	for _, ci := range n.CacheInfo {
		t := target{blockSizeLabel: ci.BlockSizeLabel, numBlocksLabel: ci.NumBlocksLabel}
		if t.blockSizeLabel == "" {
			t.blockSizeLabel = defaultBlockSizeLabel
		}
		if t.numBlocksLabel == "" {
			t.numBlocksLabel = defaultNumBlocksLabel
		}
		add(fieldCacheInfo, ci.Series, t)
	}
	if len(errs) == 0 && len(s.byName) == 0 {
		errs = append(errs, errors.New("no series to read"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

func checkSeries(s Series) error {
	if s.Name == "" {
		return errors.New("no metric name")
	}
	if len(s.Name) > maxName {
		return fmt.Errorf("metric name longer than %d bytes", maxName)
	}
	if !validName(s.Name, false) {
		return errors.New("invalid metric name")
	}
	if len(s.Labels) > maxMatch {
		return fmt.Errorf("more than %d label matchers", maxMatch)
	}
	for _, l := range s.Labels {
		if !validName(l.Name, true) {
			return fmt.Errorf("invalid label name %q", l.Name)
		}
	}
	return nil
}

func validName(s string, label bool) bool {
	class := uint8(metricByte)
	if label {
		class = labelByte
	}
	if s == "" || !isNameStart(s[0], label) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if charClass[s[i]]&class == 0 {
			return false
		}
	}
	return true
}

// mayRead reports whether name may be one of the schema's, cheaply.
func (s *Schema) mayRead(name []byte) bool {
	n := len(name)
	if n == 0 || n > 64 || s.lens&(1<<(n-1)) == 0 {
		return false
	}
	m := mark(name)
	return s.marks[m/64]&(1<<(m%64)) != 0
}

// mark is a 12-bit digest of a name's length and three of its bytes, the
// last among them: it tells most names apart from the schema's without
// hashing them whole (samples of a histogram we do not read share all but
// the end of their names with those of one we read).
func mark(name []byte) uint {
	n := len(name)
	return (uint(n) ^ uint(name[n-1])<<3 ^ uint(name[n/2])<<5 ^ uint(name[(n-1)*3/4])<<1) % 4096
}

// targets returns the series named name.
func (s *Schema) targets(name []byte) []target {
	if !s.mayRead(name) {
		return nil
	}
	return s.byName[string(name)]
}

// matches reports whether a sample's label set carries every matcher.
func matches(labels []byte, want []LabelMatch) bool {
	if len(want) == 0 {
		return true
	}
	var found uint
	it := labelIter{c: cursor{b: labels}}
	for {
		l, ok := it.next()
		if !ok {
			break
		}
		if !l.hasValue {
			continue
		}
		for i, w := range want {
			if string(l.key) != w.Name {
				continue
			}
			if !labelIs(l, w.Value) {
				return false
			}
			found |= 1 << i
		}
	}
	return !it.bad && found == 1<<len(want)-1
}

func labelIs(l label, v string) bool {
	if !l.escaped {
		return string(l.value) == v
	}
	return labelValue(l) == v
}
