package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fakeModel streams chat chunks like a model server; behaviour is chosen per
// request by the user message.
type fakeModel struct {
	inFlight, maxInFlight atomic.Int64
	clientLeft            chan struct{}
}

func newFakeModel(t *testing.T) (*fakeModel, *httptest.Server) {
	m := &fakeModel{clientLeft: make(chan struct{}, 16)}
	srv := httptest.NewServer(m)
	t.Cleanup(srv.Close)
	return m, srv
}

func (m *fakeModel) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := m.inFlight.Add(1)
	defer m.inFlight.Add(-1)
	for {
		old := m.maxInFlight.Load()
		if n <= old || m.maxInFlight.CompareAndSwap(old, n) {
			break
		}
	}
	raw, _ := io.ReadAll(r.Body)
	msg := string(raw)
	if strings.Contains(msg, "refuse") {
		http.Error(w, "no endpoint", http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flush := func(s string) {
		_, _ = fmt.Fprint(w, s)
		w.(http.Flusher).Flush()
	}
	flush(`data: {"choices":[{"delta":{"role":"assistant"}}]}` + "\n\n")
	flush(`data: {"choices":[{"delta":{"content":"Hello"}}]}` + "\n\n")
	switch {
	case strings.Contains(msg, "hold"):
		// Keep the stream open until the client goes away.
		<-r.Context().Done()
		m.clientLeft <- struct{}{}
		return
	case strings.Contains(msg, "cut"):
		return
	}
	flush(`data: {"choices":[{"delta":{"content":" world"}}]}` + "\n\n")
	flush("data: [DONE]\n\n")
}

func chat(id int, text string, abort bool) request {
	return request{ID: id, Group: id % 2, Abort: abort,
		Body: []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`)}
}

func newSender(srv *httptest.Server, total int) *sender {
	return &sender{http: srv.Client(), url: srv.URL + "/v1/chat/completions", timeout: time.Minute, tally: &tally{total: total}}
}

func TestSenderOne(t *testing.T) {
	cases := map[string]struct {
		req         request
		wantAborted bool
		wantErr     string
		wantTTFT    bool
	}{
		"completes":                      {req: chat(1, "hi", false), wantTTFT: true},
		"aborts after the first content": {req: chat(2, "hold", true), wantAborted: true, wantTTFT: true},
		"refused":                        {req: chat(3, "refuse", false), wantErr: "status 503: no endpoint"},
		"stream ends without done":       {req: chat(4, "cut", false), wantErr: errNoDone.Error(), wantTTFT: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m, srv := newFakeModel(t)
			o := newSender(srv, 1).one(t.Context(), tc.req)
			if o.ID != tc.req.ID || o.Group != tc.req.Group {
				t.Errorf("outcome is for request %d group %d, want %d group %d", o.ID, o.Group, tc.req.ID, tc.req.Group)
			}
			if o.Aborted != tc.wantAborted {
				t.Errorf("aborted = %t, want %t", o.Aborted, tc.wantAborted)
			}
			if (o.TTFT > 0) != tc.wantTTFT {
				t.Errorf("TTFT = %v, want one: %t", o.TTFT, tc.wantTTFT)
			}
			switch {
			case tc.wantErr == "" && o.Err != nil:
				t.Errorf("error %v, want none", o.Err)
			case tc.wantErr != "" && (o.Err == nil || !strings.Contains(o.Err.Error(), tc.wantErr)):
				t.Errorf("error %v, want one containing %q", o.Err, tc.wantErr)
			}
			if tc.wantAborted {
				select {
				case <-m.clientLeft:
				case <-time.After(10 * time.Second):
					t.Error("the server never saw the aborting client go away")
				}
			}
		})
	}
}

func TestRunAllBoundsConcurrencyAndKeepsOrder(t *testing.T) {
	m, srv := newFakeModel(t)
	var reqs []request
	for i := range 20 {
		reqs = append(reqs, chat(i, "hi", i%5 == 0))
	}
	s := newSender(srv, len(reqs))
	outs := s.runAll(t.Context(), reqs, 3)
	if got := m.maxInFlight.Load(); got > 3 {
		t.Errorf("%d requests were in flight at once, want at most 3", got)
	}
	for i, o := range outs {
		if o.ID != i || o.Err != nil {
			t.Errorf("outcome %d: id %d, error %v", i, o.ID, o.Err)
		}
	}
	snap := s.tally.snapshot()
	want := tallySnapshot{Total: 20, Done: 20, Aborted: 4}
	if snap != want {
		t.Errorf("tally %+v, want %+v", snap, want)
	}
}

func TestRunAllStopsWhenCancelled(t *testing.T) {
	_, srv := newFakeModel(t)
	ctx, cancel := context.WithCancel(t.Context())
	reqs := []request{chat(0, "hold", false), chat(1, "hi", false), chat(2, "hi", false)}
	done := make(chan []outcome)
	s := newSender(srv, len(reqs))
	go func() { done <- s.runAll(ctx, reqs, 1) }()
	for s.tally.snapshot().InFlight == 0 {
		select {
		case <-time.After(10 * time.Millisecond):
		case <-t.Context().Done():
			t.Fatal("the first request never started")
		}
	}
	cancel()
	outs := <-done
	for i, o := range outs {
		if !errors.Is(o.Err, context.Canceled) {
			t.Errorf("outcome %d: error %v, want context.Canceled", i, o.Err)
		}
	}
}
