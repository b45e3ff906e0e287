package policy

import (
	"slices"
	"time"

	"github.com/inferpick/inferpick/picker/prefix"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/session"
)

// markSession marks the candidates on the session's pod and reports
// whether there are any: the pod the request's token names, or with
// session ids the pod the id hashes to (idPod). When the candidates are a
// sample of a large pool, the pod's workers outside it are admitted as
// they would have been: live, serving the model, with room for the
// request.
func (e *engine) markSession(p *pick, all []*registry.Worker, sampled bool, filter *modelFilter, now time.Time) bool {
	var pod sessionPod
	switch {
	case e.ids && p.req.SessionID.Valid():
		if pod.w = idPod(p.req.SessionID, all, filter, e.ranged, p.req.Tokens, e.stageLabels(p.req)); pod.w == nil {
			return false
		}
	case !e.ids && p.req.Session.Valid():
		pod.ref = p.req.Session
	default:
		return false
	}
	found := false
	for i := range p.cands {
		if pod.has(p.cands[i].w) {
			p.cands[i].session, found = true, true
		}
	}
	if found || !sampled {
		return found
	}
	for _, w := range all {
		if w == nil || !pod.has(w) || isCandidate(p.cands, w) {
			continue
		}
		if n := len(p.cands); !e.admitOne(p, w, filter, now) && len(p.cands) > n {
			p.cands[n].session, found = true, true
		}
	}
	return found
}

// sessionPod is the session's pod: the one a token names, or a worker of
// the one an id hashes to.
type sessionPod struct {
	ref *session.Ref
	w   *registry.Worker
}

// has reports whether w is on the session's pod.
func (s *sessionPod) has(w *registry.Worker) bool {
	ns, name := w.Pod()
	if s.w != nil {
		wns, wname := s.w.Pod()
		return ns == wns && name == wname
	}
	return s.ref.Is(ns, name)
}

// idPod returns a worker of the pod a session id goes to, nil when there is
// none: of the pods with a worker in all that is live, serves the model,
// (ranged) takes a prompt of tokens tokens (contextLength.filter) and
// passes the label filters labels, the heaviest in the id's rendezvous
// order (prefix.Rendezvous of the id and the pod's namespace/name, every
// port of a pod alike). Load plays no part, so every picker replica chooses
// the same pod without a word to the others, and a pod that leaves moves
// only the ids that were its own; a pod saturated for the request leaves
// the pick as usual.
func idPod(id session.ID, all []*registry.Worker, filter *modelFilter, ranged bool, tokens int, labels labelMatcher) *registry.Worker {
	var best *registry.Worker
	var weight uint64
	for _, w := range all {
		if w == nil || !w.Live() || !filter.admits(w) || ranged && !w.ContextRange().Holds(tokens) || !labels.admits(w.Labels()) {
			continue
		}
		if r := prefix.Rendezvous(id.Key(), w.PodKey()); best == nil || r > weight {
			best, weight = w, r
		}
	}
	return best
}

func isCandidate(cs []candidate, w *registry.Worker) bool {
	for i := range cs {
		if cs[i].w == w {
			return true
		}
	}
	return false
}

// appendPinned appends to dst the cheapest candidate on the session's pod,
// then up to n-1 distinct fallbacks among the candidates on other pods,
// cheapest first: a session pod that fails its request leaves the gateway
// other pods to try.
func appendPinned(dst []*registry.Worker, cs []candidate, n int) []*registry.Worker {
	best := -1
	for i := range cs {
		if cs[i].session && (best < 0 || less(&cs[i], &cs[best])) {
			best = i
		}
	}
	cs[0], cs[best] = cs[best], cs[0] // the primary first, where indexed.chose looks for it
	dst = append(slices.Grow(dst, min(n, len(cs))), cs[0].w)
	rest := cs[1:]
	k := 0
	for i := range rest {
		if !rest[i].session {
			rest[k], rest[i] = rest[i], rest[k]
			k++
		}
	}
	return appendCheapest(dst, rest[:k], n-1)
}
