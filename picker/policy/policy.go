// Package policy decides which worker serves a request. A Policy orders the
// candidate workers, primary first; the engine shared by every policy drops
// removed and saturated workers before the policy sees them (but see
// Request.Overflow), breaks ties at random and returns distinct workers.
// Policies read the registry and the prefix index only: nothing here knows
// gRPC, Envoy or request bodies.
package policy

import (
	"errors"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/session"
)

// Request is what a policy knows of one request.
type Request struct {
	Model     string
	CacheSalt string
	// Prompt is the prompt text in chat-template order, as segments to be
	// read as one concatenated string. It may alias the request body: a
	// policy never keeps it past the call.
	Prompt [][]byte
	// Tokens is the prompt's length in tokens as its parser estimates it
	// (openai.Request.Tokens), which contextLength judges by.
	Tokens int
	// Reserve is capacity the request must leave free on a worker for
	// requests of higher priority: in-flight places under Config.MaxInFlight
	// and waiting places under Config.QueueThreshold. A worker with less
	// room left counts as saturated for this request; at least one place
	// always remains usable.
	Reserve int
	// Overflow lets the request go to workers past both the queue and the
	// KV-cache thresholds when no candidate is under them: the pick is then
	// made among those, by the policy as usual (the load it ranks by
	// prefers the least loaded), as the upstream picker schedules a request
	// that is not sheddable on a saturated pool, to the model servers' own
	// queues. It never passes Config.MaxInFlight (less Reserve): a worker
	// at that cap is never a candidate, and when every one is the pick
	// returns ErrSaturated all the same. A worker under the thresholds is
	// always preferred to one past them.
	Overflow bool
	// Subset says the candidates are a part of the pool the caller chose
	// (the gateway's subset hint), in a list it may reuse: the pick then
	// looks at every one of them and remembers nothing of the list. Without
	// it the candidates are a list that never changes, such as the
	// registry's snapshot: the policy keeps what it derives from such a
	// list while the list lasts, and over a large pool it samples
	// (sample.go).
	Subset bool
	// Shared is the model servers' own account of where the prompt is
	// cached, when the caller looked it up (package kvindex); nil when it
	// did not. It covers what every picker replica placed, where the
	// policy's index knows only this replica's placements.
	Shared *Shared
	// Hashes, when set, keeps the prompt's hashes from one call of the
	// policy to the next for this request (Knows, then Pick), so that the
	// prompt is hashed once. The caller gives each request an empty one
	// (see Hashes.Reset) and never shares one between requests.
	Hashes *Hashes
	// Session is the pod the request's session token names, nil (or
	// naming no pod) without one. With Config.SessionAffinity the pick
	// keeps the request there (mode pin) or scores that pod higher (mode
	// prefer) when the pod has a worker among the live candidates with
	// room for it; otherwise the pick is as usual. It may alias the
	// caller's memory: the policy never keeps it past the call.
	Session *session.Ref
	// SessionID is the request's session id, with sessionAffinity key id;
	// the zero ID without one. Its pod is the heaviest in the id's
	// rendezvous order of the candidates' pods that are live and serve
	// the model (their load aside), so every replica chooses it alike;
	// the pick then keeps the request there, or prefers it, as for a
	// token's pod.
	SessionID session.ID
	// Exclude, when set, is a worker the pick never returns: the pod a
	// request is decoded on, when the pick looks for another pod to
	// prefill its prompt (Config.Disaggregation).
	Exclude *registry.Worker
	// Prefill says the pick is of a pod to prefill another's request
	// (Config.Disaggregation): DisaggregationConfig.PrefillLabelFilters
	// apply to it, not Config.LabelFilters.
	Prefill bool
	// SLO is the request's latency objectives (Config.SLO); the zero SLO
	// states none.
	SLO SLO
	// Predicted, when set and Config.SLO is, receives what the request's
	// latencies are predicted to be on the primary picked, for the caller
	// to report the observed ones against (LatencyObserver).
	Predicted *Prediction
}

// Hashes is a prompt's block hashes, computed by the policy for one
// request. The zero value is empty.
type Hashes struct {
	ix   *prefix.Index // the index whose hashes sums are; nil: none yet
	sums []uint64
	// The primary of the last pick that placed the prompt, by ID, and the
	// prompt's leading blocks it held before the pick placed them there
	// (Held).
	primary    uint32
	primaryHad int
	picked     bool
}

// Reset empties h for the next request, keeping its memory up to the
// hashes of a prompt of maxKeptPrompt bytes: a larger one's (1/8 of its
// size) is let go, so that a pooled request does not pin it.
func (h *Hashes) Reset() {
	h.ix, h.sums, h.picked = nil, h.sums[:0], false
	if cap(h.sums) > maxKeptPrompt/prefix.BlockSize {
		h.sums = nil
	}
}

// maxKeptPrompt is the size of the largest prompt whose hashes' memory
// Hashes.Reset keeps, as large as the largest body an ext_proc stream keeps
// for the next.
const maxKeptPrompt = 1 << 20

// Shared is what the model servers' KV-cache events tell of a prompt.
type Shared struct {
	// Holds are the workers whose caches hold a leading part of the
	// prompt. None means no server had stored its first block when the
	// events were last read; a replica may still have sent it somewhere,
	// its prefill not yet done, so the prompt's home keeps its credit.
	Holds []SharedHold
}

// SharedHold is one worker holding the first Share (0 to 1) of a prompt.
type SharedHold struct {
	Worker uint32
	Share  float64
}

// Policy orders candidates for a request.
type Policy interface {
	// Pick returns the primary worker first, then up to n-1 distinct
	// fallbacks, all taken from candidates. A candidate may be removed from
	// the registry concurrently: one already removed when the pick starts is
	// never returned, and a guard admitted on one removed later is harmless.
	// Errors are ErrNoCandidates, ErrSaturated, ErrModelNotServed, with
	// label filters ErrLabelFilter or, with contextLength.filter,
	// ErrContextLength (ErrPromptTooLong).
	Pick(req *Request, candidates []*registry.Worker, n int) ([]*registry.Worker, error)
	Observer
	// IndexStats returns the prefix index's statistics, and false for a
	// policy that keeps no index.
	IndexStats() (prefix.Stats, bool)
	// Held returns the bytes of the request's prompt, from its start,
	// that the policy's index places on w, as whole blocks (with
	// Request.Shared, the servers' account where it says more); 0 for a
	// policy that keeps no index. For the primary of the request's last
	// pick it is what the primary held before that pick placed the prompt
	// there. With Request.Hashes, the prompt is not hashed again.
	Held(req *Request, w *registry.Worker) int
}

// Observer learns from where a request was actually served, when the
// gateway fell back from the primary. Policies without anything to learn
// ignore it.
type Observer interface {
	Observe(req *Request, served *registry.Worker)
}

var (
	// ErrNoCandidates reports that there is no live candidate to pick from.
	ErrNoCandidates = errors.New("no candidate worker")
	// ErrSaturated reports that every live candidate is saturated.
	ErrSaturated = errors.New("every candidate worker is saturated")
	// ErrModelNotServed reports that every live candidate has listed the
	// models it serves and none serves the requested one.
	ErrModelNotServed = errors.New("no candidate worker serves the model")
)
