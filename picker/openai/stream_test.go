package openai

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// scanned is what a test compares after feeding a whole response: the events
// of each Feed in order (those that noticed nothing left out), then End's.
type scanned struct {
	Events []string
	Usage  Usage
}

// scanChunks feeds the chunks one by one, then ends the body.
func scanChunks(s *StreamScanner, chunks []string) scanned {
	var got scanned
	for _, c := range chunks {
		if ev := s.Feed([]byte(c)); ev != 0 {
			got.Events = append(got.Events, ev.String())
		}
	}
	if ev := s.End(); ev != 0 {
		got.Events = append(got.Events, "end:"+ev.String())
	}
	got.Usage = s.Usage()
	return got
}

const (
	chatRole  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}` + "\n\n"
	chatTok   = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"Hel"},"finish_reason":null}]}` + "\n\n"
	chatTok2  = `data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}` + "\n\n"
	chatUsage = `data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":12,"total_tokens":14,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":8}}}` + "\n\n"
	done      = "data: [DONE]\n\n"
)

func TestStreamScanner(t *testing.T) {
	tests := map[string]struct {
		json   bool
		limit  int
		chunks []string
		want   scanned
	}{
		"chat stream": {
			chunks: []string{chatRole, chatTok, chatTok2, chatUsage, done},
			want: scanned{
				Events: []string{"first-token", "usage", "done"},
				Usage:  Usage{PromptTokens: 12, CompletionTokens: 2, TotalTokens: 14, CachedTokens: 8},
			},
		},
		"chat stream in one chunk": {
			chunks: []string{chatRole + chatTok + chatTok2 + chatUsage + done},
			want: scanned{
				Events: []string{"first-token|usage|done"},
				Usage:  Usage{PromptTokens: 12, CompletionTokens: 2, TotalTokens: 14, CachedTokens: 8},
			},
		},
		"split inside data and inside a string": {
			chunks: []string{chatRole[:3], chatRole[3:], chatTok[:60], chatTok[60:95], chatTok[95:], "da", "ta: [DO", "NE]\n", "\n"},
			want:   scanned{Events: []string{"first-token", "done"}},
		},
		"role-only chunk is not a token": {
			chunks: []string{chatRole},
		},
		"reasoning content is a token": {
			chunks: []string{`data: {"choices":[{"delta":{"reasoning_content":"hmm"}}]}` + "\n\n"},
			want:   scanned{Events: []string{"first-token"}},
		},
		"tool call is a token": {
			chunks: []string{`data: {"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f"}}]}}]}` + "\n\n"},
			want:   scanned{Events: []string{"first-token"}},
		},
		"empty tool calls are not a token": {
			chunks: []string{`data: {"choices":[{"delta":{"tool_calls":[],"content":null}}]}` + "\n\n"},
		},
		"completions text": {
			chunks: []string{
				`data: {"choices":[{"index":0,"text":""}]}` + "\n\n",
				`data: {"choices":[{"index":0,"text":" upon"}]}` + "\n\n",
				`data: {"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":1,"prompt_tokens_details":null}}` + "\n\n",
				done,
			},
			want: scanned{
				Events: []string{"first-token", "usage", "done"},
				Usage:  Usage{PromptTokens: 4, CompletionTokens: 1},
			},
		},
		"continuous usage keeps the latest": {
			chunks: []string{
				`data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":4,"completion_tokens":1}}` + "\n\n",
				`data: {"choices":[{"delta":{"content":"b"}}],"usage":{"prompt_tokens":4,"completion_tokens":2}}` + "\n\n",
			},
			want: scanned{
				Events: []string{"first-token|usage", "usage"},
				Usage:  Usage{PromptTokens: 4, CompletionTokens: 2},
			},
		},
		"responses stream": {
			chunks: []string{
				"event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"usage\":null}}\n\n",
				"event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"m\",\"delta\":\"Hi\"}\n\n",
				"event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"id\":\"r\",\"usage\":{\"input_tokens\":9,\"output_tokens\":3,\"input_tokens_details\":{\"cached_tokens\":5},\"total_tokens\":12}}}\n\n",
			},
			want: scanned{
				Events: []string{"first-token", "usage"},
				Usage:  Usage{PromptTokens: 9, CompletionTokens: 3, TotalTokens: 12, CachedTokens: 5},
			},
		},
		"responses empty delta is not a token": {
			chunks: []string{`data: {"type":"response.output_text.delta","delta":""}` + "\n\n"},
		},
		"CRLF lines, comments and other fields": {
			chunks: []string{": keep-alive\r\n\r\nid: 1\r\nretry: 10\r", "\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\r", "\n\r\ndata: [DONE]\r\r"},
			// The first event ends at the blank line in the last chunk.
			want: scanned{Events: []string{"first-token|done"}},
		},
		"data split over lines": {
			chunks: []string{"data: {\"choices\":\ndata: [{\"text\":\"x\"}]}\n\n"},
			want:   scanned{Events: []string{"first-token"}},
		},
		"invalid event is ignored": {
			chunks: []string{`data: {"choices":[{"text":"x"}],"usage":{"prompt_tokens":1}` + "\n\n", done},
			want:   scanned{Events: []string{"done"}},
		},
		"error event": {
			chunks: []string{`data: {"error":{"message":"boom","code":500}}` + "\n\n"},
			want:   scanned{Events: []string{"failed"}},
		},
		"unterminated last event is read at end": {
			chunks: []string{chatTok, "data: [DONE]"},
			want:   scanned{Events: []string{"first-token", "end:done"}},
		},
		"done reported once": {
			chunks: []string{done, done},
			want:   scanned{Events: []string{"done"}},
		},
		"long line overflows": {
			limit:  64,
			chunks: []string{"data: {\"x\":\"" + strings.Repeat("a", 40), strings.Repeat("a", 40) + "\"}\n\n", done},
			want:   scanned{Events: []string{"overflow"}},
		},
		"long event overflows": {
			limit:  64,
			chunks: []string{strings.Repeat("data: 0123456789\n", 8) + "\n", done},
			want:   scanned{Events: []string{"overflow"}},
		},
		"json body": {
			json: true,
			chunks: []string{
				`{"id":"c","choices":[{"message":{"role":"assistant","content":"a}]\"b"}}],`,
				`"usage":{"prompt_tokens":7,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`,
				"\n",
			},
			want: scanned{
				Events: []string{"first-token", "usage|done"},
				Usage:  Usage{PromptTokens: 7, CompletionTokens: 3, CachedTokens: 4},
			},
		},
		"json responses body": {
			json:   true,
			chunks: []string{`{"object":"response","output":[],"usage":{"input_tokens":3,"output_tokens":2}}`},
			want:   scanned{Events: []string{"first-token|usage|done"}, Usage: Usage{PromptTokens: 3, CompletionTokens: 2}},
		},
		"json body without usage": {
			json:   true,
			chunks: []string{`{"data":[{"embedding":[0.1]}]}`},
			want:   scanned{Events: []string{"first-token|done"}},
		},
		"truncated json body": {
			json:   true,
			chunks: []string{`{"usage":{"prompt_tokens":7}`},
			want:   scanned{Events: []string{"first-token"}},
		},
		"json body over the limit: a member over it is skipped": {
			json:   true,
			limit:  16,
			chunks: []string{`{"usage":`, `{"prompt_tokens":7}}`},
			want:   scanned{Events: []string{"first-token", "done"}},
		},
		"json body over the limit: usage after a large member": {
			json:  true,
			limit: 64,
			chunks: []string{`{"object":"list","data":[{"embedding":[` + strings.Repeat("0.125,", 20), strings.Repeat("0.125,", 20) + `0]}],`,
				`"model":"m","usage":{"prompt_tokens":7,"total_tokens":7}}`},
			want: scanned{Events: []string{"first-token", "usage|done"}, Usage: Usage{PromptTokens: 7, TotalTokens: 7}},
		},
		"json body over the limit: an error member": {
			json:   true,
			limit:  32,
			chunks: []string{`{"data":"` + strings.Repeat("x", 40) + `",`, `"error":{"code":500}}`},
			want:   scanned{Events: []string{"first-token", "done|failed"}},
		},
		"json array over the limit overflows": {
			json:   true,
			limit:  16,
			chunks: []string{`[1,2,3,4,`, `5,6,7,8,9,10]`},
			want:   scanned{Events: []string{"first-token", "overflow"}},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			s := StreamScanner{Limit: tc.limit}
			s.Reset(!tc.json)
			got := scanChunks(&s, tc.chunks)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStreamScannerReset(t *testing.T) {
	var s StreamScanner
	s.Feed([]byte(chatTok + chatUsage + done))
	s.Reset(true)
	if u := s.Usage(); u != (Usage{}) {
		t.Errorf("Usage after Reset = %+v, want zero", u)
	}
	if ev := s.Feed([]byte(chatTok + done)); ev != FirstToken|Done {
		t.Errorf("Feed after Reset = %v, want %v", ev, FirstToken|Done)
	}
}

func TestStreamScannerAfterLargeResponse(t *testing.T) {
	var s StreamScanner
	big := `data: {"choices":[{"delta":{"content":"` + strings.Repeat("x", 200<<10) + `"}}]}` + "\n\n"
	if ev := s.Feed([]byte(big[:100<<10])); ev != 0 {
		t.Fatalf("Feed of half an event = %v, want none", ev)
	}
	s.Reset(true)
	if ev := s.Feed([]byte(chatTok + chatUsage)); ev != FirstToken|UsageSeen {
		t.Errorf("Feed after Reset = %v, want %v", ev, FirstToken|UsageSeen)
	}
}

func TestStreamScannerWarmFeedDoesNotAllocate(t *testing.T) {
	var s StreamScanner
	chunks := [][]byte{[]byte(chatRole), []byte(chatTok[:50]), []byte(chatTok[50:]), []byte(chatUsage), []byte(done)}
	allocs := testing.AllocsPerRun(10, func() {
		s.Reset(true)
		for _, c := range chunks {
			s.Feed(c)
		}
	})
	if allocs != 0 {
		t.Errorf("a warm scanner allocated %v times per stream, want 0", allocs)
	}
}

// TestOutputEventsCountTheEventsThatCarryOutput: a stream's output events
// are those whose choices carry output, not its role-only first event, its
// usage-only last one or [DONE]; a JSON body has none, and Reset forgets
// them.
func TestOutputEventsCountTheEventsThatCarryOutput(t *testing.T) {
	var s StreamScanner
	s.Reset(true)
	s.Feed([]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"))
	for _, tok := range []string{"a", "b", "c"} {
		s.Feed([]byte(`data: {"choices":[{"index":0,"delta":{"content":"` + tok + `"}}]}` + "\n\n"))
	}
	s.Feed([]byte(`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3}}` + "\n\ndata: [DONE]\n\n"))
	if got := s.OutputEvents(); got != 3 {
		t.Errorf("OutputEvents = %d, want 3", got)
	}
	s.Reset(false)
	s.Feed([]byte(`{"choices":[{"index":0,"message":{"content":"abc"}}]}`))
	if got := s.OutputEvents(); got != 0 {
		t.Errorf("OutputEvents of a JSON body = %d, want 0", got)
	}
}

// TestSeveralChoicesAreTold: a stream in which a choice of index 1 carries
// output has several choices; one whose only choice is index 0 has not.
func TestSeveralChoicesAreTold(t *testing.T) {
	var s StreamScanner
	s.Reset(true)
	s.Feed([]byte(`data: {"choices":[{"index":0,"delta":{"content":"a"}}]}` + "\n\n"))
	if s.SeveralChoices() {
		t.Error("SeveralChoices after index 0 alone, want false")
	}
	s.Feed([]byte(`data: {"choices":[{"index":1,"delta":{"content":"b"}}]}` + "\n\n"))
	if !s.SeveralChoices() {
		t.Error("SeveralChoices after index 1 carried output, want true")
	}
	s.Reset(true)
	if s.SeveralChoices() {
		t.Error("SeveralChoices after Reset, want false")
	}
}
