package registry

// Role is the stages of a request a worker's pod serves, as llm-d labels
// pods (llm-d.ai/role). The zero Role is an unlabelled pod's: it decodes,
// and prefills only its own requests.
type Role uint8

const (
	// RoleDecode says the pod decodes the requests routed to it.
	RoleDecode Role = 1 << iota
	// RolePrefill says the pod prefills prompts for other pods to decode.
	RolePrefill
	// RoleLabelled says the pod carries a role label. It keeps a label that
	// names neither stage (encode) apart from the zero Role.
	RoleLabelled
)

// ParseRole returns the role of a pod whose role label is value, labelled
// reporting whether it has one. The values are llm-d's: decode;
// prefill; prefill-decode and both; encode-prefill; encode-prefill-decode.
// Any other value (encode) serves neither stage a picker chooses.
func ParseRole(value string, labelled bool) Role {
	if !labelled {
		return 0
	}
	switch value {
	case "decode":
		return RoleLabelled | RoleDecode
	case "prefill", "encode-prefill":
		return RoleLabelled | RolePrefill
	case "prefill-decode", "both", "encode-prefill-decode":
		return RoleLabelled | RoleDecode | RolePrefill
	}
	return RoleLabelled
}

// Decodes reports whether a request may be decoded on the pod: it has no
// role label, or one that names decode.
func (r Role) Decodes() bool { return r&RoleLabelled == 0 || r&RoleDecode != 0 }

// Prefills reports whether the pod may prefill for another pod: its role
// label names prefill. An unlabelled pod does not.
func (r Role) Prefills() bool { return r&RolePrefill != 0 }

// String names the role as /debug/workers shows it: decode, prefill,
// prefill-decode, or none for a label of neither; "" for no label.
func (r Role) String() string {
	switch {
	case r&RoleLabelled == 0:
		return ""
	case r.Decodes() && r.Prefills():
		return "prefill-decode"
	case r.Decodes():
		return "decode"
	case r.Prefills():
		return "prefill"
	}
	return "none"
}

// roleLists are the live workers by role, in the snapshot's order: those
// that decode and those that prefill. Neither is modified once made; the
// decoders are the live list itself when every worker decodes.
type roleLists struct {
	decoders, prefillers []*Worker
}

// roles returns m's role lists, made on the snapshot's first pick.
func (m *members) roles() *roleLists {
	if l := m.byRole.Load(); l != nil {
		return l
	}
	l := &roleLists{decoders: m.live}
	all := true
	for _, w := range m.live {
		r := w.Role()
		all = all && r.Decodes()
		if r.Prefills() {
			l.prefillers = append(l.prefillers, w)
		}
	}
	if !all {
		l.decoders = make([]*Worker, 0, len(m.live))
		for _, w := range m.live {
			if w.Role().Decodes() {
				l.decoders = append(l.decoders, w)
			}
		}
	}
	if l.prefillers == nil {
		l.prefillers = []*Worker{}
	}
	if !m.byRole.CompareAndSwap(nil, l) {
		return m.byRole.Load()
	}
	return l
}

// Decoders returns the current workers whose pods decode (Role.Decodes),
// ordered by address: Workers itself when every one does. The list is made
// once per snapshot, shared, and must not be modified.
func (r *Registry) Decoders() []*Worker { return r.snapshot.Load().roles().decoders }

// Prefillers returns the current workers whose pods prefill for others
// (Role.Prefills), ordered by address. The list is made once per snapshot,
// shared, and must not be modified.
func (r *Registry) Prefillers() []*Worker { return r.snapshot.Load().roles().prefillers }
