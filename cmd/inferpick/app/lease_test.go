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
	l := &leaseElector{}
	cb := l.callbacks()
	gained := []<-chan struct{}{l.Gained(), l.Gained()}

	term, lose := context.WithCancel(t.Context())
	lose()
	cb.OnStoppedLeading()
	cb.OnStartedLeading(term) // the late goroutine
	if l.Leading() {
		t.Error("leading after a term that was lost before its start ran")
	}
	for _, c := range gained {
		select {
		case <-c:
			t.Error("a lost term announced a gain")
		default:
		}
	}

	term, lose = context.WithCancel(t.Context())
	cb.OnStartedLeading(term)
	if !l.Leading() {
		t.Error("not leading in a live term")
	}
	for i, c := range gained {
		select {
		case <-c:
		default:
			t.Errorf("a live term announced no gain to subscriber %d", i)
		}
	}
	lose()
	cb.OnStoppedLeading()
	if l.Leading() {
		t.Error("leading after the term ended")
	}
}
