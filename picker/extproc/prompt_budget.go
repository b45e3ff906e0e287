package extproc

import "unsafe"

// promptSegment is what one prompt segment takes in Request.Prompt.
const promptSegment = int(unsafe.Sizeof([]byte(nil)))

// maxPooledSegments is the largest segment list an exchange keeps for the
// next stream (24 KiB): larger ones come only from bodies of very many
// messages or parts.
const maxPooledSegments = 1 << 10

// reservePrompt charges the parsed prompt's segment list to the body
// budget. A segment takes 24 bytes, so a body of many tiny messages or
// parts (`[{},{},...]`, three bytes each) makes a list several times its
// own size, memory its reservation does not cover. ok is false when the
// budget cannot.
func (x *exchange) reservePrompt() bool {
	n := cap(x.parsed.Prompt)*promptSegment - x.promptReserved
	if n <= 0 {
		return true
	}
	if !x.s.budget.take(n) {
		return false
	}
	x.promptReserved += n
	return true
}

// dropPrompt forgets the parsed request and gives its segment list's
// reservation back; a list past maxPooledSegments is let go rather than
// kept unaccounted.
func (x *exchange) dropPrompt() {
	x.parsed.Reset()
	if cap(x.parsed.Prompt) > maxPooledSegments {
		x.parsed.Prompt = nil
	}
	x.s.budget.give(x.promptReserved)
	x.promptReserved = 0
}
