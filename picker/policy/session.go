package policy

import (
	"slices"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// markSession marks the candidates on the pod the request's session token
// names and reports whether there are any. When the candidates are a
// sample of a large pool, the pod's workers outside it are admitted as
// they would have been: live, serving the model, with room for the
// request.
func (e *engine) markSession(p *pick, all []*registry.Worker, sampled bool, filter *modelFilter, now time.Time) bool {
	ref, found := p.req.Session, false
	for i := range p.cands {
		if ref.Is(p.cands[i].w.Pod()) {
			p.cands[i].session, found = true, true
		}
	}
	if found || !sampled {
		return found
	}
	for _, w := range all {
		if w == nil || !ref.Is(w.Pod()) || isCandidate(p.cands, w) {
			continue
		}
		if n := len(p.cands); !e.admitOne(p, w, filter, now) && len(p.cands) > n {
			p.cands[n].session, found = true, true
		}
	}
	return found
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
