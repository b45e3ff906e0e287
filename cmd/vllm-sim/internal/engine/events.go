package engine

import (
	"slices"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/kvcache"
	"github.com/inferpick/inferpick/picker/kvevents"
)

// WithEvents makes the engine report its KV-cache events, as vLLM's
// --kv-events-config does: publish receives the events of each step that
// changed the cache, in order, as one batch once the step's time has
// passed and before its tokens reach the sequences. It is called from the
// Run loop, outside the engine's lock, and must not keep the slice.
func WithEvents(publish func([]kvevents.Event)) Option {
	return func(e *Engine) {
		e.publish = publish
		e.cache.SetObserver((*eventLog)(e))
		if e.tier != nil {
			e.tier.SetObserver((*tierLog)(e))
		}
	}
}

// WhenScheduled makes the engine publish a step's events as the step is
// planned, before its time passes, as vLLM releases did that published from
// the scheduler's schedule(); later ones publish from update_from_output,
// once the step has run (WithEvents).
func WhenScheduled() Option { return func(e *Engine) { e.scheduled = true } }

// eventLog turns the cache's notifications into events. Its methods run
// under e.mu, inside the admission of e.admitting.
type eventLog Engine

var _ kvcache.Observer = (*eventLog)(nil)

// Stored logs a BlockStored for a run of blocks the admitted sequence put
// in the cache: their hashes, the block before them as the parent, the ids
// of their tokens, and the sequence's adapter.
func (l *eventLog) Stored(hashes []uint64, from, to int) {
	e := (*Engine)(l)
	s := e.admitting
	bs := e.cfg.BlockSize
	blockBytes := bs * kvcache.BytesPerToken
	text := s.prompt[from*blockBytes : to*blockBytes]
	ev := kvevents.Event{
		Kind:      kvevents.BlockStored,
		Hashes:    slices.Clone(hashes[from:to]),
		TokenIDs:  kvcache.TokenIDs(text, make([]uint32, 0, (to-from)*bs)),
		BlockSize: bs,
		Medium:    gpu,
	}
	if from > 0 {
		ev.Parent, ev.HasParent = hashes[from-1], true
	}
	if s.lora != "" {
		ev.LoraName, ev.LoraID, ev.HasLora = s.lora, e.loraID(s.lora), true
	}
	if s.salt != "" && from == 0 {
		ev.Extra = []kvevents.ExtraKeys{kvevents.SaltKeys(s.salt)}
	}
	if e.cfg.SlidingWindow == 0 {
		e.events = append(e.events, ev)
		return
	}
	// A hybrid model's groups each store the blocks, under the same
	// hashes: the full-attention group's first, as vLLM orders them.
	ev.Group, ev.HasGroup, ev.SpecKind = fullGroup, true, fullAttention
	window := ev
	window.Hashes = slices.Clone(ev.Hashes)
	window.Group, window.SpecKind = windowGroup, slidingWindow
	e.events = append(e.events, ev, window)
	if e.windowed == nil {
		e.windowed = map[uint64]bool{}
	}
	for _, h := range ev.Hashes {
		e.windowed[h] = true
	}
}

// Removed logs a BlockRemoved of the GPU pool: of both groups' blocks for a
// hybrid model, the sliding-window group's unless it dropped h already.
func (l *eventLog) Removed(h uint64) {
	e := (*Engine)(l)
	if e.cfg.SlidingWindow == 0 {
		e.logRemoved(h, gpu, noGroup)
		return
	}
	e.logRemoved(h, gpu, fullGroup)
	e.dropWindowed(h)
}

// The KV-cache groups of a hybrid model's events (Config.SlidingWindow),
// and the group of events that name none.
const (
	fullGroup     = 0
	windowGroup   = 1
	noGroup       = -1
	fullAttention = "full_attention"
	slidingWindow = "sliding_window"
)

// dropWindowed logs that the sliding-window group no longer holds block h,
// if it did. Called with e.mu held.
func (e *Engine) dropWindowed(h uint64) {
	if e.windowed[h] {
		delete(e.windowed, h)
		e.logRemoved(h, gpu, windowGroup)
	}
}

// leftWindow drops from the sliding-window group the blocks of s's prompt
// that end before its last SlidingWindow tokens, which its layers no longer
// read once the prompt is computed: vLLM frees them then, and they go out
// as removed here (soon after, in vLLM, when their space is reused).
// Called with e.mu held.
func (e *Engine) leftWindow(s *Sequence) {
	if len(e.windowed) == 0 { // not a hybrid model, or no events
		return
	}
	out := max(0, s.promptTokens-e.cfg.SlidingWindow) / e.cfg.BlockSize
	for _, h := range s.hashes[:min(out, len(s.hashes))] {
		e.dropWindowed(h)
	}
}

// The media events name: the GPU pool's, and the offloading tier's as
// vLLM's CPU backend names it.
const (
	gpu = "GPU"
	cpu = "CPU"
)

// logRemoved logs a BlockRemoved of the medium's (and the group's, unless
// noGroup), or adds h to the last event when that is one of the same
// medium and group. Called with e.mu held.
func (e *Engine) logRemoved(h uint64, medium string, group int64) {
	ev := kvevents.Event{Kind: kvevents.BlockRemoved, Medium: medium}
	if group != noGroup {
		ev.Group, ev.HasGroup = group, true
	}
	if n := len(e.events); n > 0 {
		if last := &e.events[n-1]; last.Kind == ev.Kind && last.Medium == ev.Medium && last.HasGroup == ev.HasGroup && last.Group == ev.Group {
			last.Hashes = append(last.Hashes, h)
			return
		}
	}
	ev.Hashes = []uint64{h}
	e.events = append(e.events, ev)
}

// tierLog turns the offloading tier's notifications into events. Its
// methods run under e.mu, when a sequence's prefill is done.
type tierLog Engine

var _ kvcache.Observer = (*tierLog)(nil)

// Stored logs a BlockStored of the tier for blocks it copied, as vLLM's
// OffloadingConnector publishes them: the GPU blocks' hashes, the block
// size, no parent, token ids or adapter.
func (l *tierLog) Stored(hashes []uint64, from, to int) {
	e := (*Engine)(l)
	e.events = append(e.events, kvevents.Event{
		Kind:      kvevents.BlockStored,
		Hashes:    slices.Clone(hashes[from:to]),
		BlockSize: e.cfg.BlockSize,
		Medium:    cpu,
	})
}

// Removed logs a BlockRemoved of the tier.
func (l *tierLog) Removed(h uint64) { (*Engine)(l).logRemoved(h, cpu, noGroup) }

// loraID returns the adapter's id in events: 1 for the first adapter that
// stored blocks, 2 for the next, and so on, kept for the engine's life.
// Called with e.mu held.
func (e *Engine) loraID(name string) int64 {
	id, ok := e.loraIDs[name]
	if !ok {
		if e.loraIDs == nil {
			e.loraIDs = map[string]int64{}
		}
		id = int64(len(e.loraIDs) + 1)
		e.loraIDs[name] = id
	}
	return id
}

// takeEvents returns the events logged since the last call. Called with
// e.mu held.
func (e *Engine) takeEvents() []kvevents.Event {
	evs := e.events
	e.events = nil
	return evs
}

// publishEvents hands a step's events to the publisher, if any.
func (e *Engine) publishEvents(evs []kvevents.Event) {
	if e.publish != nil && len(evs) > 0 {
		e.publish(evs)
	}
}
