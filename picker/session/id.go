package session

import "github.com/inferpick/inferpick/picker/prefix"

// DefaultIDHeader is the header that carries a session id when none is
// configured, llm-d's (session-affinity-filter, strategy session_id).
const DefaultIDHeader = "x-session-id"

// ID is a client's opaque session id, hashed as it is read: the policy
// places the session by rendezvous hashing of the hash over the pods, so
// every picker replica sends it to the same pod and none keeps a table of
// sessions. The zero value is no id.
type ID struct {
	key uint64
	set bool
}

// Read sets id to the session id v, hashed in place; an empty v is no id.
func (id *ID) Read(v []byte) {
	*id = ID{}
	if len(v) > 0 {
		*id = ID{key: prefix.StableBytes(v), set: true}
	}
}

// Of is the ID of the session id s.
func Of(s string) ID {
	var id ID
	id.Read([]byte(s))
	return id
}

// Valid reports whether id is a session id.
func (id ID) Valid() bool { return id.set }

// Key is the id's rendezvous key, the same in every process.
func (id ID) Key() uint64 { return id.key }
