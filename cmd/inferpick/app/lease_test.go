package app

import (
	"context"
	"testing"
)

// client-go starts OnStartedLeading on a goroutine of its own and, when the
// lease is lost, cancels the term's context before OnStoppedLeading. A term
// lost before that goroutine runs must not leave the replica leading (it
// would record Events beside the next leader); a term that starts does.
func TestATermLostBeforeItStartedLeavesNoLeader(t *testing.T) {
	l := &leaseElector{gained: make(chan struct{}, 1)}
	cb := l.callbacks()

	term, lose := context.WithCancel(t.Context())
	lose()
	cb.OnStoppedLeading()
	cb.OnStartedLeading(term) // the late goroutine
	if l.Leading() {
		t.Error("leading after a term that was lost before its start ran")
	}
	select {
	case <-l.Gained():
		t.Error("a lost term announced a gain")
	default:
	}

	term, lose = context.WithCancel(t.Context())
	cb.OnStartedLeading(term)
	if !l.Leading() {
		t.Error("not leading in a live term")
	}
	select {
	case <-l.Gained():
	default:
		t.Error("a live term announced no gain")
	}
	lose()
	cb.OnStoppedLeading()
	if l.Leading() {
		t.Error("leading after the term ended")
	}
}
