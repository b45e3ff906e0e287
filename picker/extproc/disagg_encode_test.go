package extproc

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// encoder is an encode-only pod of the pools below.
const encoder = "10.0.0.4:8000"

// epdPool is two decode pods, a prefill pod and an encode pod.
var epdPool = map[string]string{decodeA: "decode", decodeB: "decode", prefill: "prefill", encoder: "encode"}

// imageChat is a chat completion with an image part.
func imageChat(text string) string {
	return fmt.Sprintf(`{"model":"m","stream":true,"messages":[{"role":"user","content":[{"type":"text","text":%q},{"type":"image_url","image_url":{"url":"http://img/1.png"}}]}]}`, text)
}

// sendBody routes a chat request whose body is body, with extra headers.
func (e *env) sendBody(body string, extra ...string) (*session, routedReply) {
	e.t.Helper()
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, extra...)
	s.requestBody(body, true)
	r := s.routed(true)
	return s, r
}

// A chat with an image names the encode pod to the decode pod's sidecar,
// which holds load until the decode pod answers; a text-only chat names
// none. A client's own encoders header is removed from each.
func TestAMultimodalChatIsEncodedOnAnEncodePod(t *testing.T) {
	e := roleEnv(t, &policy.DisaggregationConfig{MinUncachedTokens: 100, Encode: policy.EncodeMultimodal}, policy.Config{}, epdPool)
	s, r := e.sendBody(imageChat("what is this?"), policy.EncodersHeader, "169.254.169.254:80")
	if r.set[policy.EncodersHeader] != encoder {
		t.Fatalf("the routed request's %s = %q, want the encode pod %s", policy.EncodersHeader, r.set[policy.EncodersHeader], encoder)
	}
	if p := primary(r); p == encoder || p == prefill || slices.Contains(r.removed, policy.EncodersHeader) {
		t.Errorf("routed to %s removing %v: want a decode pod, and the encoders header set rather than removed", p, r.removed)
	}
	if v, ok := r.set[policy.PrefillerHeader]; ok {
		t.Errorf("a short prompt names prefill pod %q", v)
	}
	if got := e.load(encoder); got != [2]int64{1, 0} {
		t.Errorf("while it encodes the encode pod's load is %v, want [1 0]", got)
	}
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	if got := e.load(encoder); got != [2]int64{} {
		t.Errorf("after the decode pod answered the encode pod's load is %v, want none", got)
	}
	if got := e.released(reasonEncoded); got[reasonEncoded] != 1 {
		t.Errorf("releases %v, want one encoded", got)
	}
	s.responseBody(sseDone, true)
	s.recv()

	// Long and multimodal: both stages.
	s, r = e.sendBody(imageChat(long))
	if r.set[policy.EncodersHeader] != encoder || r.set[policy.PrefillerHeader] != prefill {
		t.Errorf("a long chat with an image names encoders %q and prefill pod %q, want %s and %s", r.set[policy.EncodersHeader], r.set[policy.PrefillerHeader], encoder, prefill)
	}
	s.cancel()
	eventually(t, "every load to end", func() bool { return e.load(encoder) == [2]int64{} && e.load(prefill) == [2]int64{} })

	s, r = e.sendChat("hello", policy.EncodersHeader, "169.254.169.254:80")
	if v, ok := r.set[policy.EncodersHeader]; ok || !slices.Contains(r.removed, policy.EncodersHeader) {
		t.Errorf("a text chat names encoders %q, removing %v: want none, and the client's header removed", v, r.removed)
	}
	if got := e.load(encoder); got != [2]int64{} {
		t.Errorf("a text chat holds load %v on the encode pod", got)
	}
	s.responseHeaders(200, "application/json", true, "")
	s.recv()

	e.checkDecisions(t, map[string]map[string]int{disaggDecisions: {"decode-only": 1, "encode-decode": 1, "encode-prefill-decode": 1}})
}

// Without the encode stage configured, or with no encode pod with room, a
// chat with an image names no encoder and is served: never refused. With
// prefillPods none only the encode stage is split.
func TestWithoutARoomyEncodePodTheRequestGoesWithoutTheEncodeStage(t *testing.T) {
	t.Run("encode off", func(t *testing.T) {
		e := roleEnv(t, &policy.DisaggregationConfig{}, policy.Config{}, epdPool)
		_, r := e.sendBody(imageChat("hi"))
		if v, ok := r.set[policy.EncodersHeader]; ok {
			t.Errorf("names encoders %q with the encode stage off", v)
		}
	})
	t.Run("the encode pod is full", func(t *testing.T) {
		e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal}, policy.Config{MaxInFlight: 1}, epdPool)
		g := e.worker(encoder).Admit()
		defer g.Release()
		_, r := e.sendBody(imageChat("hi"))
		if v, ok := r.set[policy.EncodersHeader]; ok || r.dest == "" {
			t.Errorf("routed to %q naming encoders %q, want a decode pod and none", r.dest, v)
		}
	})
	t.Run("prefill pods none", func(t *testing.T) {
		e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone}, policy.Config{}, epdPool)
		_, r := e.sendBody(imageChat(long))
		if v, ok := r.set[policy.PrefillerHeader]; ok || r.set[policy.EncodersHeader] != encoder {
			t.Errorf("names prefill pod %q and encoders %q, want none and %s", v, r.set[policy.EncodersHeader], encoder)
		}
	})
}

// Equally loaded encode pods take requests in turn, and an encode-only pod
// never gets a whole request.
func TestEncodePodsTakeRequestsInTurn(t *testing.T) {
	e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone}, policy.Config{},
		map[string]string{decodeA: "decode", decodeB: "encode", prefill: "encode-prefill"})
	seen := map[string]int{}
	for i := range 6 {
		s, r := e.sendBody(imageChat(fmt.Sprint(i)))
		if primary(r) != decodeA {
			t.Fatalf("request %d routed to %q, want the decode pod %s", i, r.dest, decodeA)
		}
		seen[r.set[policy.EncodersHeader]]++
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	}
	if seen[decodeB] != 3 || seen[prefill] != 3 {
		t.Errorf("encoders named %v, want each of %s and %s 3 times", seen, decodeB, prefill)
	}
}

// An encode pod whose served models are known and leave the request's
// model out is never named: the sidecar's call to it would be refused.
func TestAnEncodePodThatServesAnotherModelIsNotNamed(t *testing.T) {
	e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone},
		policy.Config{MetricsStaleness: policy.Duration{Duration: time.Hour}},
		map[string]string{decodeA: "decode", decodeB: "encode", prefill: "encode"})
	e.worker(decodeB).SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"other"}, Complete: true}, Scraped: time.Now()})
	e.worker(prefill).SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"m"}, Complete: true}, Scraped: time.Now()})
	wantEncoder(t, e, prefill, "the encode pod that serves m")
}

// The decode pod, when it encodes too, is named its own encoder only when
// no other encode pod has room, even one busier than it: else it would hold
// two counts for one request.
func TestAnotherEncodePodIsPreferredToTheDecodePod(t *testing.T) {
	e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone}, policy.Config{MaxInFlight: 3},
		map[string]string{decodeA: "encode-prefill-decode", decodeB: "encode"})
	var busy []*registry.Guard
	defer func() {
		for _, g := range busy {
			g.Release()
		}
	}()
	busy = append(busy, e.worker(decodeB).Admit(), e.worker(decodeB).Admit())
	for i := range 3 {
		s, r := e.sendBody(imageChat(fmt.Sprint(i)))
		if primary(r) != decodeA || r.set[policy.EncodersHeader] != decodeB {
			t.Errorf("request %d routed to %s naming encoders %q, want %s and %s", i, primary(r), r.set[policy.EncodersHeader], decodeA, decodeB)
		}
		if got := e.load(decodeA); got != [2]int64{1, 0} {
			t.Errorf("request %d holds %v on the decode pod, want one count", i, got)
		}
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	}
	busy = append(busy, e.worker(decodeB).Admit())
	_, r := e.sendBody(imageChat("full"))
	if primary(r) != decodeA || r.set[policy.EncodersHeader] != decodeA {
		t.Errorf("with the other encode pod full, routed to %s naming encoders %q, want %s for both", primary(r), r.set[policy.EncodersHeader], decodeA)
	}
}

// Only the parts llm-d's decider and sidecar both encode name an encoder:
// a chat with a file or video part goes without the encode stage, holds
// nothing on the encode pod and counts as decode-only.
func TestAChatWithoutEncodableMediaNamesNoEncoder(t *testing.T) {
	e := roleEnv(t, &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone}, policy.Config{}, epdPool)
	for _, part := range []string{`{"type":"file","file":{"file_id":"f"}}`, `{"type":"video_url","video_url":{"url":"http://v/1.mp4"}}`} {
		body := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this?"},` + part + `]}]}`
		s, r := e.sendBody(body)
		if v, ok := r.set[policy.EncodersHeader]; ok || r.dest == "" {
			t.Errorf("a chat with %s routed to %q naming encoders %q, want a decode pod and none", part, r.dest, v)
		}
		if got := e.load(encoder); got != [2]int64{} {
			t.Errorf("a chat with %s holds %v on the encode pod, want none", part, got)
		}
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	}
	e.checkDecisions(t, map[string]map[string]int{disaggDecisions: {"decode-only": 2}})
}

// The encode stage's label filters keep the encode pods a request's media
// may go to: an encode pod they leave out is never named.
func TestTheEncodeLabelFiltersKeepTheEncodePods(t *testing.T) {
	d := &policy.DisaggregationConfig{Encode: policy.EncodeMultimodal, PrefillPods: policy.PrefillPodsNone,
		EncodeLabelFilters: []policy.LabelFilter{{Label: "zone", Values: []string{"a"}}}}
	cfg := policy.Config{Disaggregation: d}
	e := roleEnv(t, d, cfg, map[string]string{decodeA: "decode", decodeB: "encode", prefill: "encode"})
	relabelAt(e, cfg, map[string]map[string]string{decodeB: {"zone": "b"}, prefill: {"zone": "a"}})
	e.server.opts.EncodeLabelFilter = cfg.EncodeLabelFilter()
	wantEncoder(t, e, prefill, "the encode pod in zone a")
}

// wantEncoder sends four image chats and checks that each names want, the
// encode pod it should for why, as its encoder; each is answered at once.
func wantEncoder(t *testing.T, e *env, want, why string) {
	t.Helper()
	for i := range 4 {
		s, r := e.sendBody(imageChat(fmt.Sprint(i)))
		if got := r.set[policy.EncodersHeader]; got != want {
			t.Errorf("request %d names encoders %q, want %s, %s", i, got, want, why)
		}
		s.responseHeaders(200, "application/json", true, "")
		s.recv()
	}
}
