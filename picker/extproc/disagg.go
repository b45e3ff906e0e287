package extproc

import (
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	sessiontoken "github.com/inferpick/inferpick/picker/session"
)

// decoders are the candidates of a request's pick: the workers whose pods
// decode, split or not (a pod labelled only prefill or encode has no
// sidecar to take a whole request), every worker of a registry that keeps
// no roles. In a pool without role labels that is every worker.
func (s *Server) decoders() []*registry.Worker {
	if s.roles != nil {
		return s.roles.Decoders()
	}
	return s.reg.Workers()
}

// generates reports whether requests of kind generate output, which the
// split prefills apart.
func generates(kind openai.Kind) bool {
	return kind == openai.Completions || kind == openai.ChatCompletions || kind == openai.Responses
}

// holder is a picker that can tell how much of a request's prompt a worker
// holds (policy.Policy's Held).
type holder interface {
	Held(req *policy.Request, w *registry.Worker) int
}

// disaggregate decides, once the decode pod is picked and guarded, whether
// another pod prefills the request's prompt: when the prompt's tokens the
// decode pod does not hold are at least MinUncachedTokens, it picks a pod
// that prefills (any pod with PrefillPods all; never the decode pod) with
// the same policy and takes a load guard on it, in prefill, which the route
// names to the decode pod's sidecar; the guard is held until the decode pod
// answers (its sidecar answers once the prefill is done) or the request
// ends. Only a request that generates, sent to the exact path of
// completions, chat completions or responses (what llm-d's sidecar
// splits), is: an embeddings request, a tunnel, an upload, a prefixed path
// (/openai/v1/chat/completions) or another path is decoded alone. So is one no prefill
// pod has room for: the decode pod prefills it itself, and it is never
// refused for the split.
func (x *exchange) disaggregate() {
	d := x.s.opts.Disaggregation
	if d == nil || x.s.roles == nil || !generates(x.kind) || len(x.picked) == 0 || !sidecarSplits(pathOnly(x.path)) {
		return
	}
	x.encodeApart(d)
	if x.pick.Hashes == nil || d.PrefillPods == policy.PrefillPodsNone {
		return
	}
	decode := x.picked[0]
	n := x.parsed.PromptLen()
	held := 0
	if h, ok := x.s.picker.(holder); ok {
		held = h.Held(&x.pick, decode)
	}
	// The whole prompt counts, media and tools included, as llm-d's P/D
	// decider counts a chat's messages as their JSON; only its context-length
	// estimate (openai.Request.Tokens) counts text alone.
	if n/openai.BytesPerToken-held/openai.BytesPerToken < d.MinUncachedTokens {
		return
	}
	prefillers := x.s.roles.Prefillers()
	if d.PrefillPods == policy.PrefillPodsAll {
		prefillers = x.s.reg.Workers()
	}
	if len(prefillers) == 0 || len(prefillers) == 1 && prefillers[0] == decode {
		return
	}
	// The session keeps the decode pod; the prefill pod is the policy's
	// choice among those with room (no overflow past the thresholds) that
	// the prefill stage's label filters keep. The
	// gateway's subset hint names where it may send the request, and the
	// prefill pod is reached by the sidecar.
	x.prePick = x.pick
	x.prePick.Session, x.prePick.SessionID = nil, sessiontoken.ID{}
	x.prePick.Subset, x.prePick.Overflow, x.prePick.Exclude, x.prePick.Prefill = false, false, decode, true
	// The request's objectives and prediction are its decode pod's: the
	// prefill pick neither judges the pods by them nor overwrites it.
	x.prePick.SLO, x.prePick.Predicted = policy.SLO{}, nil
	picked, err := x.runPicker(&x.preBuf, &x.prePick, prefillers, 1)
	x.prePick = policy.Request{}        // it aliases the body
	if err != nil || len(picked) == 0 { // the pick never returns Exclude
		return
	}
	if g, ok := x.admitOn(picked[0], 0); ok {
		x.prefill = g
	}
}

// encodeApart picks, for a chat completion with a part an encode pod takes
// apart (openai.Request.Encodable: an image_url or input_audio part, what
// llm-d's multimodal decider looks for and its sidecar sends an encoder)
// when DisaggregationConfig.Encode says so, the pod that encodes them for the decode pod's sidecar, and takes a
// load guard on it, held as the prefill pod's is: until the decode pod
// answers (its sidecar answers once the encoders have), or the request
// ends. As llm-d's encode profile picks one pod, one pod is picked: of the
// live pods whose role label names encode, that the encode stage's label
// filters keep (DisaggregationConfig.EncodeLabelFilters), and that may
// serve the request's model (a pod whose served models are known and
// leave it out would answer the sidecar's call 404), the one with the
// fewest requests in flight that has room, ties going round in turn. The decode pod, when
// it encodes too, is taken only when no other such pod has room: its own
// guard already counts the request there. With none the request goes
// without the encode stage: the prefill pod encodes its media, and it is
// never refused for the split.
func (x *exchange) encodeApart(d *policy.DisaggregationConfig) {
	if d.Encode != policy.EncodeMultimodal || x.kind != openai.ChatCompletions || !x.parsed.Encodable {
		return
	}
	encoders := x.s.roles.Encoders()
	n := len(encoders)
	if n == 0 {
		return
	}
	decode, keep := x.picked[0], x.s.opts.EncodeLabelFilter
	// The fewest in flight is the most room: when that pod is at the
	// in-flight cap, every one is.
	start := int(x.s.encodeTurn.Add(1) % uint64(n))
	var best, self *registry.Worker
	for i := range n {
		w := encoders[(start+i)%n]
		switch {
		case !w.Live() || !mayServe(w, x.pick.Model) || keep != nil && !keep(w):
		case w == decode:
			self = w
		case best == nil || w.InFlight() < best.InFlight():
			best = w
		}
	}
	for _, w := range [...]*registry.Worker{best, self} {
		if w == nil {
			continue
		}
		if g, ok := x.admitOn(w, 0); ok {
			x.encode = g
			return
		}
	}
}

// mayServe reports whether w may serve model: unless its served models
// are known in full and leave model out.
func mayServe(w *registry.Worker, model string) bool {
	m := w.Metrics()
	if model == "" || m == nil || m.Served == nil || !m.Served.Complete {
		return true
	}
	return m.Served.Serves(model)
}

// reachesRank reports whether, with Options.DataParallel, the pod's sidecar
// sends the request on to the rank its policy.DataParallelHeader names: as
// llm-d's sidecar, only a POST to /v1/chat/completions, /v1/completions or
// /v1/responses. It sends any other request (embeddings, an upload, a
// tunnel, gRPC, another path) to rank 0, the rank on the primary port.
func (x *exchange) reachesRank() bool { return x.post && sidecarSplits(pathOnly(x.path)) }

// onPrimary keeps, of candidates, the workers on port: the ranks a request
// reaches when its pod's sidecar sends it to rank 0. It appends to
// x.allowed, filtering in place when candidates are x.allowed already.
// With none on port (a pool whose target ports leave the primary port out)
// it keeps every candidate.
func (x *exchange) onPrimary(candidates []*registry.Worker, port int) []*registry.Worker {
	kept := x.allowed[:0] // writes nothing ahead of what it reads
	for _, w := range candidates {
		if int(w.Endpoint().Address.Port()) == port {
			kept = append(kept, w)
		}
	}
	if len(kept) == 0 {
		return candidates
	}
	x.allowed = kept
	return kept
}

// sidecarSplits reports whether llm-d's routing sidecar splits a request
// to path: it serves the stages apart for POSTs to exactly these paths
// and proxies any other to its decode pod whole, so a prefill or encode
// pod named for another path would hold load for work it never gets.
func sidecarSplits(path string) bool {
	switch path {
	case "/v1/chat/completions", "/v1/completions", "/v1/responses":
		return true
	}
	return false
}
