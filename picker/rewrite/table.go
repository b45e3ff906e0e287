// Package rewrite holds the model rewrites of the served pool: rules that
// send the requests for one model name to other models, split by weight.
// The controller writes the table; the request path reads it without a lock.
package rewrite

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Target is a model a rule sends requests to.
type Target struct {
	// Model is the target's model name.
	Model string
	// Weight is the target's share of the rule's requests, relative to the
	// other targets' weights. When every target of a rule has weight 0 they
	// share equally.
	Weight int32
}

// Rule sends the requests for its models, or for every model when it has
// none, to its targets.
type Rule struct {
	// Models are the model names the rule matches exactly; none matches
	// every model.
	Models []string
	// Targets are where matched requests go. A rule without targets
	// leaves requests as they are.
	Targets []Target
}

// Object is one InferenceModelRewrite: its rules in list order and when it
// was created, which decides between rules of several rewrites.
type Object struct {
	Created time.Time
	Rules   []Rule
}

// Decision is where one request goes.
type Decision struct {
	// Model is the target's model name.
	Model string
	// JSON is Model as the content of a JSON string, escaped, ready to be
	// spliced into a body between the quotes of the "model" value.
	JSON []byte
	// Source names the rewrite the rule came from.
	Source string
	// Named says the rule lists the requested model by name; a rule
	// without models rewrites any name a client sends.
	Named bool
}

// Table is the model rewrites of the served pool. Lookups load an immutable
// snapshot; every change builds and stores a new one.
type Table struct {
	mu      sync.Mutex // serializes writers
	objects map[string]Object
	snap    atomic.Pointer[snapshot]
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{objects: map[string]Object{}}
	t.snap.Store(&snapshot{})
	return t
}

// Set records the rules of the named rewrite, replacing what it had.
func (t *Table) Set(name string, obj Object) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.objects[name] = obj
	t.snap.Store(build(t.objects))
}

// Delete forgets the named rewrite.
func (t *Table) Delete(name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.objects[name]; !ok {
		return
	}
	delete(t.objects, name)
	t.snap.Store(build(t.objects))
}

// Len returns the number of rewrites in the table.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.objects)
}

// Rewrite returns where a request for model with the given request id
// goes, and false when no rule matches the model. The choice among a rule's
// targets depends only on the request id, so a retried request keeps its
// target.
func (t *Table) Rewrite(model, requestID string) (Decision, bool) {
	s := t.snap.Load()
	r, named := s.exact[model]
	if !named {
		r = s.generic
	}
	if r == nil {
		return Decision{}, false
	}
	tg := r.choose(requestID)
	return Decision{Model: tg.model, JSON: tg.json, Source: r.source, Named: named}, true
}

// snapshot is the table compiled for lookups: for each model the rule that
// wins it, and the rule that wins every other model.
type snapshot struct {
	exact   map[string]*compiled
	generic *compiled
}

type compiled struct {
	source  string
	targets []compiledTarget
	// cum[i] is the sum of the weights of targets[:i+1].
	cum []uint64
}

type compiledTarget struct {
	model string
	json  []byte
}

// build compiles the rewrites: the oldest rewrite (then the lowest name)
// comes first, and within a rewrite the rules keep their order, so the
// first rule seen for a model is the one that wins it.
func build(objects map[string]Object) *snapshot {
	names := make([]string, 0, len(objects))
	for n := range objects {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if c := objects[a].Created.Compare(objects[b].Created); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	s := &snapshot{exact: map[string]*compiled{}}
	for _, n := range names {
		for _, r := range objects[n].Rules {
			if len(r.Targets) == 0 {
				continue
			}
			c := compile(n, r.Targets)
			if len(r.Models) == 0 {
				if s.generic == nil {
					s.generic = c
				}
				continue
			}
			for _, m := range r.Models {
				if _, ok := s.exact[m]; !ok {
					s.exact[m] = c
				}
			}
		}
	}
	return s
}

func compile(source string, targets []Target) *compiled {
	c := &compiled{source: source, targets: make([]compiledTarget, len(targets)), cum: make([]uint64, len(targets))}
	allZero := !slices.ContainsFunc(targets, func(t Target) bool { return t.Weight > 0 })
	var sum uint64
	for i, t := range targets {
		c.targets[i] = compiledTarget{model: t.Model, json: Escape(t.Model)}
		switch {
		case allZero:
			sum++
		case t.Weight > 0:
			sum += uint64(t.Weight)
		}
		c.cum[i] = sum
	}
	return c
}

// choose picks a target by weight from a hash of the request id.
func (c *compiled) choose(requestID string) compiledTarget {
	total := c.cum[len(c.cum)-1]
	if len(c.targets) == 1 || total == 0 {
		return c.targets[0]
	}
	x := hash(requestID) % total
	i, _ := slices.BinarySearchFunc(c.cum, x, func(cum, x uint64) int {
		if cum <= x {
			return -1
		}
		return 1
	})
	return c.targets[i]
}

// hash is FNV-1a over s, then mixed (splitmix64's finalizer) so that ids
// that differ only in their last characters spread over the whole range.
func hash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// Escape returns s as the content of a JSON string, as a model server
// writes it back: '&', '<' and '>' stay as they are (json.Marshal would
// write \u0026, and the response's "model" would not be recognised).
func Escape(s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	out := b.Bytes()
	return out[1 : len(out)-2] // the quotes and Encode's newline
}
