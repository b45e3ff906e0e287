package engine

import (
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
)

// WithEvents makes the engine report its KV-cache events, as vLLM's
// --kv-events-config does: publish receives the events of each step that
// changed the cache, in order, once the step is planned and outside the
// engine's lock. It must not keep the slice.
func WithEvents(publish func([]kvevents.Event)) Option {
	return func(e *Engine) {
		e.publish = publish
		e.cache.SetObserver((*eventLog)(e))
	}
}

// eventLog turns the cache's notifications into events. Its methods run
// under e.mu, inside the admission of e.admitting.
type eventLog Engine

// Added appends hashes[i] to the admitted sequence's last BlockStored when
// it continues that event's run, else starts one: a run of newly cached
// blocks, its parent the block before it.
func (l *eventLog) Added(hashes []uint64, i int) {
	e := (*Engine)(l)
	s := e.admitting
	bs := e.cfg.BlockSize
	blockText := s.prompt[i*bs*kvcache.BytesPerToken : (i+1)*bs*kvcache.BytesPerToken]
	if n := len(e.events); n > 0 && e.lastRun == s && e.lastIndex == i-1 {
		ev := &e.events[n-1]
		ev.Hashes = append(ev.Hashes, hashes[i])
		ev.TokenIDs = kvcache.TokenIDs(blockText, ev.TokenIDs)
		e.lastIndex = i
		return
	}
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: bs, Medium: "GPU",
		Hashes: []uint64{hashes[i]}, TokenIDs: kvcache.TokenIDs(blockText, nil)}
	if i > 0 {
		ev.Parent, ev.HasParent = hashes[i-1], true
	}
	if s.lora != "" {
		ev.LoraName, ev.LoraID, ev.HasLora = s.lora, int64(loraSalt(s.lora)>>33), true
	}
	e.events = append(e.events, ev)
	e.lastRun, e.lastIndex = s, i
}

// Evicted appends a BlockRemoved, or extends the last event when it is one.
func (l *eventLog) Evicted(h uint64) {
	e := (*Engine)(l)
	if n := len(e.events); n > 0 && e.events[n-1].Kind == kvevents.BlockRemoved {
		e.events[n-1].Hashes = append(e.events[n-1].Hashes, h)
		return
	}
	e.events = append(e.events, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []uint64{h}, Medium: "GPU"})
	e.lastRun = nil
}

// takeEvents returns the events logged since the last call. Called with
// e.mu held.
func (e *Engine) takeEvents() []kvevents.Event {
	evs := e.events
	e.events, e.lastRun = nil, nil
	return evs
}
