package extproc

import (
	"encoding/base64"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

const sessionHeader = "x-session-token"

// tokenOf is the session token of the test pod name (no namespace).
func tokenOf(name string) string { return base64.StdEncoding.EncodeToString([]byte("/" + name)) }

// sessionEnv serves three pods with the least-load policy, session
// affinity pinned on x-session-token. pod-0 holds one request, pod-1 two,
// pod-2 none: without a session, requests go to pod-2.
func sessionEnv(t *testing.T) (*env, []*registry.Worker) {
	t.Helper()
	return affinityEnv(t, policy.SessionAffinityConfig{}, func(o *Options) { o.SessionHeader = sessionHeader })
}

// affinityEnv is sessionEnv with the session affinity sa, the server's
// options set by opt to match it.
func affinityEnv(t *testing.T, sa policy.SessionAffinityConfig, opt func(*Options)) (*env, []*registry.Worker) {
	t.Helper()
	e := newEnv(t, []string{"127.0.0.1:8000", "127.0.0.2:8000", "127.0.0.3:8000"}, opt)
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad, SessionAffinity: &sa}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	ws := make([]*registry.Worker, 3)
	for i := range ws {
		ws[i] = e.worker("127.0.0." + string(rune('1'+i)) + ":8000")
	}
	for i, n := range []int{1, 2, 0} {
		for range n {
			g := ws[i].Admit()
			t.Cleanup(func() { g.Release() })
		}
	}
	return e, ws
}

// A request with a session token goes to its pod, though another is idler,
// and its response names the pod that served it only when the token named
// another. A token that names no usable pod changes nothing but the
// response's token. Every request's load is released.
func TestSessionAffinityOverTheStream(t *testing.T) {
	for name, tc := range map[string]struct {
		token     string // "" sends none
		park      int    // the pod to park first, -1 for none
		status    int
		served    int    // which of the destination list served: 0 the primary, 1 the fallback
		wantDest  int    // the primary's pod
		wantToken string // the response's session header; "" for none
	}{
		"the token's pod, though busier":     {token: tokenOf("pod-1"), park: -1, status: 200, wantDest: 1},
		"no token":                           {park: -1, status: 200, wantDest: 2, wantToken: tokenOf("pod-2")},
		"an undecodable token":               {token: "not base64!", park: -1, status: 200, wantDest: 2, wantToken: tokenOf("pod-2")},
		"a token of no pod":                  {token: tokenOf("pod-9"), park: -1, status: 200, wantDest: 2, wantToken: tokenOf("pod-2")},
		"the token's pod is parked":          {token: tokenOf("pod-1"), park: 1, status: 200, wantDest: 2, wantToken: tokenOf("pod-2")},
		"the fallback served":                {token: tokenOf("pod-1"), park: -1, status: 200, served: 1, wantDest: 1, wantToken: tokenOf("pod-2")},
		"the pod failed: the token is kept":  {token: tokenOf("pod-1"), park: -1, status: 503, wantDest: 1},
		"a token of the idle pod":            {token: tokenOf("pod-2"), park: -1, status: 200, wantDest: 2},
		"a token of another namespace's pod": {token: base64.StdEncoding.EncodeToString([]byte("ns/pod-1")), park: -1, status: 200, wantDest: 2, wantToken: tokenOf("pod-2")},
	} {
		t.Run(name, func(t *testing.T) {
			e, ws := sessionEnv(t)
			if tc.park >= 0 {
				park(e.reg, ws[tc.park], true)
			}
			before, _ := totalLoad(ws...)
			s := e.open()
			body := chatBody("m", "hello")
			var extra []string
			if tc.token != "" {
				extra = []string{sessionHeader, tc.token}
			}
			s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
			s.requestBody(body, true)
			r := s.routed(true)
			dest := strings.Split(r.dest, ",")
			if diff := cmp.Diff(ws[tc.wantDest].Address(), dest[0]); diff != "" {
				t.Errorf("primary (-want +got):\n%s", diff)
			}
			if len(dest) != 2 || dest[1] == dest[0] {
				t.Fatalf("destination %q, want the primary and a fallback on another pod", r.dest)
			}
			s.responseHeaders(tc.status, "text/event-stream", false, dest[tc.served])
			got := ""
			for _, h := range s.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
				if h.GetHeader().GetKey() == sessionHeader {
					got = string(h.GetHeader().GetRawValue())
				}
			}
			if diff := cmp.Diff(tc.wantToken, got); diff != "" {
				t.Errorf("response %s (-want +got):\n%s", sessionHeader, diff)
			}
			s.responseBody(sse("hi")+sseDone, true)
			s.recv()
			eventually(t, "the request's load released", func() bool {
				p, d := totalLoad(ws...)
				return p == before && d == 0
			})
		})
	}
}

// Two requests of one session, the first without a token: the second
// echoes the token of the first's response and lands on the same pod,
// though by then that pod is the busiest.
func TestSessionAffinityTwoRequestsOfOneSession(t *testing.T) {
	e, ws := sessionEnv(t)
	first := e.open()
	body := chatBody("m", "hello")
	first.requestHeaders("/v1/chat/completions", len(body), false, nil)
	first.requestBody(body, true)
	r1 := first.routed(true)
	first.responseHeaders(200, "text/event-stream", false, "")
	token := string(first.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders()[0].GetHeader().GetRawValue())
	// The first request's pod becomes the busiest.
	for range 3 {
		g := ws[2].Admit()
		t.Cleanup(func() { g.Release() })
	}
	second := e.open()
	second.requestHeaders("/v1/chat/completions", len(body), false, nil, sessionHeader, token)
	second.requestBody(body, true)
	r2 := second.routed(true)
	p1, p2 := strings.Split(r1.dest, ",")[0], strings.Split(r2.dest, ",")[0]
	if p1 != p2 {
		t.Errorf("the session's second request went to %s, the first to %s", p2, p1)
	}
}

const idHeader = "x-session-id"

// idEnv is sessionEnv with session affinity on session ids in x-session-id.
func idEnv(t *testing.T) (*env, []*registry.Worker) {
	t.Helper()
	return affinityEnv(t, policy.SessionAffinityConfig{Key: policy.SessionID, Header: idHeader},
		func(o *Options) { o.SessionHeader, o.SessionIDs = idHeader, true })
}

// idRequest sends one request with the session id (none when empty) over a
// new stream of e and completes it; it returns the primary and what the
// response set of the session header ("" for nothing).
func idRequest(t *testing.T, e *env, id string) (dest, set string) {
	t.Helper()
	s := e.open()
	body := chatBody("m", "hello")
	var extra []string
	if id != "-" {
		extra = []string{idHeader, id}
	}
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
	s.requestBody(body, true)
	dest = strings.Split(s.routed(true).dest, ",")[0]
	s.responseHeaders(200, "text/event-stream", false, "")
	for _, h := range s.recv().GetResponseHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == idHeader || h.GetHeader().GetKey() == sessionHeader {
			set = h.GetHeader().GetKey() + ": " + string(h.GetHeader().GetRawValue())
		}
	}
	s.responseBody(sse("hi")+sseDone, true)
	s.recv()
	return dest, set
}

// A session id sent over the stream keeps its requests on one pod, the
// same on two pickers built alike (two replicas), whatever the load; the
// response carries nothing. Without an id, or with an empty one, a request
// is picked as usual. Every request's load is released.
func TestSessionIDsOverTheStream(t *testing.T) {
	a, wsA := idEnv(t)
	b, wsB := idEnv(t)
	beforeA, _ := totalLoad(wsA...)
	beforeB, _ := totalLoad(wsB...)
	busy := 0
	for i := range 12 {
		id := "agent-" + string(rune('a'+i))
		first, set := idRequest(t, a, id)
		if set != "" {
			t.Errorf("id %s: the response set %q, want nothing", id, set)
		}
		second, _ := idRequest(t, a, id)
		other, _ := idRequest(t, b, id)
		if second != first || other != first {
			t.Errorf("id %s: replica A sent it to %s then %s, replica B to %s; want one pod", id, first, second, other)
		}
		if first != wsA[2].Address() {
			busy++
		}
	}
	if busy == 0 {
		t.Errorf("every id went to the idle pod: placed by load, not by id")
	}
	for name, id := range map[string]string{"no id": "-", "an empty id": ""} {
		dest, set := idRequest(t, a, id)
		if diff := cmp.Diff(wsA[2].Address()+" ", dest+" "+set); diff != "" {
			t.Errorf("%s: primary and response header (-want +got):\n%s", name, diff)
		}
	}
	eventually(t, "every request's load released", func() bool {
		pa, da := totalLoad(wsA...)
		pb, db := totalLoad(wsB...)
		return pa == beforeA && da == 0 && pb == beforeB && db == 0
	})
}

// A session id is hashed where the header's bytes lie: reading one
// allocates nothing, however long.
func TestSessionIDReadAllocations(t *testing.T) {
	x := &exchange{s: &Server{opts: Options{SessionHeader: idHeader, SessionIDs: true}}}
	hv := &corev3.HeaderValue{Key: idHeader, RawValue: []byte(strings.Repeat("an agent's session ", 64))}
	if got := testing.AllocsPerRun(100, func() { x.readSession(hv) }); got != 0 || !x.sessionID.Valid() {
		t.Errorf("reading an id: %v allocations, valid %v; want 0, true", got, x.sessionID.Valid())
	}
}
