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
	// names no stage apart from the zero Role.
	RoleLabelled
	// RoleEncode says the pod encodes the multimodal inputs of requests
	// other pods prefill and decode.
	RoleEncode
)

// ParseRole returns the role of a pod whose role label is value, labelled
// reporting whether it has one. The values are llm-d's: decode; prefill;
// prefill-decode and both; encode; encode-prefill; encode-prefill-decode.
// Any other value serves no stage.
func ParseRole(value string, labelled bool) Role {
	if !labelled {
		return 0
	}
	switch value {
	case "decode":
		return RoleLabelled | RoleDecode
	case "prefill":
		return RoleLabelled | RolePrefill
	case "prefill-decode", "both":
		return RoleLabelled | RoleDecode | RolePrefill
	case "encode":
		return RoleLabelled | RoleEncode
	case "encode-prefill":
		return RoleLabelled | RoleEncode | RolePrefill
	case "encode-prefill-decode":
		return RoleLabelled | RoleEncode | RoleDecode | RolePrefill
	}
	return RoleLabelled
}

// Decodes reports whether a request may be decoded on the pod: it has no
// role label, or one that names decode.
func (r Role) Decodes() bool { return r&RoleLabelled == 0 || r&RoleDecode != 0 }

// Prefills reports whether the pod may prefill for another pod: its role
// label names prefill. An unlabelled pod does not.
func (r Role) Prefills() bool { return r&RolePrefill != 0 }

// Encodes reports whether the pod may encode multimodal inputs for
// another pod: its role label names encode. An unlabelled pod does not.
func (r Role) Encodes() bool { return r&RoleEncode != 0 }

// String names the role as /debug/workers shows it: llm-d's label value
// (decode, prefill, prefill-decode, encode, encode-prefill,
// encode-prefill-decode), or none for a label of no stage; "" for no label.
func (r Role) String() string {
	if r&RoleLabelled == 0 {
		return ""
	}
	name := ""
	switch {
	case r.Decodes() && r.Prefills():
		name = "prefill-decode"
	case r.Decodes():
		name = "decode"
	case r.Prefills():
		name = "prefill"
	}
	switch {
	case r.Encodes() && name == "":
		return "encode"
	case r.Encodes():
		return "encode-" + name
	case name == "":
		return "none"
	}
	return name
}

// roleLists are the live workers by role, in the snapshot's order: those
// that decode, those that prefill and those that encode. None is modified
// once made; the decoders are the live list itself when every worker
// decodes.
type roleLists struct {
	decoders, prefillers, encoders []*Worker
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
		if r.Encodes() {
			l.encoders = append(l.encoders, w)
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
	if l.encoders == nil {
		l.encoders = []*Worker{}
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

// Encoders returns the current workers whose pods encode multimodal inputs
// for others (Role.Encodes), ordered by address. The list is made once per
// snapshot, shared, and must not be modified.
func (r *Registry) Encoders() []*Worker { return r.snapshot.Load().roles().encoders }
