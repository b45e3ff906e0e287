package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
	"unsafe"
)

// staticMarkers are the segments of a prompt that need not lie in the body.
var staticMarkers = [][]byte{
	markSystem, markDeveloper, markUser, markAssistant, markTool, markFunction,
	markMessage, markTools, markToolCalls,
}

// within reports whether seg is a sub-slice of body's memory.
func within(seg, body []byte) bool {
	if len(seg) == 0 || len(body) == 0 {
		return false
	}
	s := uintptr(unsafe.Pointer(unsafe.SliceData(seg)))
	b := uintptr(unsafe.Pointer(unsafe.SliceData(body)))
	return s >= b && s+uintptr(len(seg)) <= b+uintptr(len(body))
}

func isStaticMarker(seg []byte) bool {
	for _, m := range staticMarkers {
		if unsafe.SliceData(seg) == unsafe.SliceData(m) && len(seg) == len(m) {
			return true
		}
	}
	return false
}

func FuzzParse(f *testing.F) {
	f.Add(uint8(ChatCompletions), []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[]}`))
	f.Add(uint8(Completions), []byte(`{"model":"m","prompt":[[1,2],"x"],"stream":true}`))
	f.Add(uint8(Responses), []byte(`{"model":"m","instructions":"i","input":[{"type":"function_call"}]}`))
	f.Add(uint8(Embeddings), []byte(`{"model":"m\u00e9","input":["a"]}`))
	f.Add(uint8(ChatCompletions), []byte(`{"model":"m","messages":[{"role":"user","content":"a"}],"messages":[]}`))
	f.Add(uint8(Completions), []byte(`{"m\u006fdel":"m","pr\u006fmpt":"a"}`))
	f.Add(uint8(ChatCompletions), []byte("\xef\xbb\xbf"+`{"model":"m","stream":"Yes","stream_options":{"include_usage":1}}`))
	f.Add(uint8(ChatCompletions), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"file","file":{}},{"type":"input_audio","input_audio":{}}]}]}`))
	f.Add(uint8(ChatCompletions), []byte(`{"model":"m","messages":[{"role":"user","content":[{"type":"video_url"},{"type":"image\u005furl"}]}]}`))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		var r Request
		err := Parse(Kind(kind%5), body, &r)
		// The model server's decoder skips a byte order mark; encoding/json
		// does not.
		text := bytes.TrimPrefix(body, bom)
		valid := json.Valid(text)
		if !valid && err == nil {
			t.Fatalf("Parse accepted invalid JSON %q", body)
		}
		if valid && utf8.Valid(text) && errors.Is(err, ErrSyntax) {
			t.Fatalf("Parse rejected valid JSON %q as a syntax error: %v", body, err)
		}
		if err != nil {
			return
		}
		var doc map[string]any
		if err := decodeJSON(body, &doc); err != nil {
			t.Fatalf("Parse accepted a body encoding/json rejects: %v", err)
		}
		if r.Model == "" || r.Model != doc["model"] {
			t.Errorf("Model = %q, encoding/json read %v", r.Model, doc["model"])
		}
		checkModelSpan(t, body, &r)
		if want := laxTrue(doc["stream"]); r.Stream != want {
			t.Errorf("Stream = %v, want %v", r.Stream, want)
		}
		for i, seg := range r.Prompt {
			if len(seg) == 0 {
				t.Errorf("Prompt[%d] is empty", i)
			}
			if !within(seg, body) && !isStaticMarker(seg) {
				t.Errorf("Prompt[%d] = %q is neither in the body nor a marker", i, seg)
			}
			// The server reads a repeated member's last value; so does the
			// prompt.
			if k := Kind(kind % 5); (k == ChatCompletions || k == Completions) && !isStaticMarker(seg) &&
				!within(seg, r.Input) && !within(seg, r.Tools) {
				t.Errorf("Prompt[%d] = %q lies outside the last %s member", i, seg, map[Kind]string{ChatCompletions: "messages", Completions: "prompt"}[k])
			}
		}
		if Kind(kind%5) == ChatCompletions && r.Encodable != encodable(doc["messages"]) {
			t.Errorf("Encodable = %v, want %v", r.Encodable, !r.Encodable)
		}
		if r.Encodable && !r.Media {
			t.Errorf("Encodable without Media")
		}
		// A token is at least a byte of the prompt: text or an id.
		if r.Tokens < 0 || r.Tokens > r.PromptLen() {
			t.Errorf("Tokens = %d, want 0 to the prompt's %d bytes", r.Tokens, r.PromptLen())
		}
		if s, ok := doc["prompt"].(string); ok && Kind(kind%5) == Completions && !bytes.ContainsRune(body, '\\') && r.Tokens != len(s)/BytesPerToken {
			t.Errorf("Tokens = %d of a %d-byte prompt, want %d", r.Tokens, len(s), len(s)/BytesPerToken)
		}
	})
}

// encodable reports whether messages, as encoding/json decoded them, have
// a content part of type image_url or input_audio.
func encodable(messages any) bool {
	list, _ := messages.([]any)
	for _, m := range list {
		m, _ := m.(map[string]any)
		parts, _ := m["content"].([]any)
		for _, part := range parts {
			part, _ := part.(map[string]any)
			if typ := part["type"]; typ == "image_url" || typ == "input_audio" {
				return true
			}
		}
	}
	return false
}

// laxTrue reports whether pydantic's lax mode reads v, as encoding/json
// decoded it, as true.
func laxTrue(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case json.Number:
		f, err := v.Float64()
		return err == nil && f == 1
	case string:
		return slices.Contains([]string{"1", "t", "y", "on", "yes", "true"}, strings.ToLower(v))
	}
	return false
}

// feedAll feeds body cut at the given chunk sizes and returns every event
// reported and the final usage.
func feedAll(streaming bool, limit int, body, cuts []byte) (Events, Usage) {
	s := StreamScanner{Limit: limit}
	s.Reset(streaming)
	var ev Events
	for _, c := range cuts {
		n := min(int(c), len(body))
		ev |= s.Feed(body[:n])
		body = body[n:]
	}
	ev |= s.Feed(body)
	ev |= s.End()
	return ev, s.Usage()
}

func FuzzStreamScanner(f *testing.F) {
	f.Add(true, []byte(chatRole+chatTok+chatUsage+done), []byte{3, 40, 1, 1, 90})
	f.Add(true, []byte("event: x\r\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"a\"}\r\n\r\n"), []byte{9, 1})
	f.Add(false, []byte(`{"choices":[{"text":"\"}"}],"usage":{"prompt_tokens":2}}`), []byte{5, 17})
	f.Add(false, []byte(`{"data":[{"embedding":[0.5,0.25,0.125,0.5,0.25,0.125,0.5,0.25,0.125]}],"model":"m","usage":{"prompt_tokens":2}}`), []byte{30, 2})
	f.Fuzz(func(t *testing.T, streaming bool, body, cuts []byte) {
		if !streaming {
			checkLargeJSON(t, body)
		}
		for _, limit := range []int{0, 64} {
			wantEv, wantUsage := feedAll(streaming, limit, body, nil)
			gotEv, gotUsage := feedAll(streaming, limit, body, cuts)
			if gotEv != wantEv || gotUsage != wantUsage {
				t.Fatalf("limit %d, cut at %v: events %v usage %+v; whole: events %v usage %+v",
					limit, cuts, gotEv, gotUsage, wantEv, wantUsage)
			}
			if !streaming && len(bytes.TrimSpace(body)) > 0 && wantEv&(FirstToken|Overflow) == 0 {
				t.Fatalf("a non-blank JSON body gave no first token: %v", wantEv)
			}
		}
	})
}

// checkLargeJSON checks a JSON object read past a limit of 64 bytes, one
// top-level member at a time: it is done when it closes, and a usage it
// reads is the one the whole body holds (when the body names one usage, and
// without escapes that could spell another). JSON text is UTF-8, which
// json.Valid does not check and the scanner does.
func checkLargeJSON(t *testing.T, body []byte) {
	t.Helper()
	if !json.Valid(body) || !utf8.Valid(body) || !bytes.HasPrefix(bytes.TrimLeft(body, " \t\r\n"), []byte("{")) {
		return
	}
	ev, usage := feedAll(false, 64, body, nil)
	if !ev.Has(Done) {
		t.Fatalf("a valid JSON object read with a limit of 64 was not done: %v", ev)
	}
	_, whole := feedAll(false, 0, body, nil)
	if bytes.Count(body, []byte("usage")) == 1 && !bytes.ContainsRune(body, '\\') && usage != (Usage{}) && usage != whole {
		t.Fatalf("usage read with a limit of 64: %+v; whole: %+v", usage, whole)
	}
}

// decodeJSON is json.Unmarshal with numbers kept as their text: JSON sets
// no range on numbers (1e400 is valid, and the model server reads it), where
// decoding into float64 rejects the body. Like json.Unmarshal, it rejects
// anything after the value; like the model server, it skips a leading byte
// order mark.
func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(bytes.TrimPrefix(b, bom)))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the JSON value")
	}
	return nil
}

// checkModelSpan checks that the model span holds the raw model string, and
// that splicing another name into it gives a valid body whose model is that
// name, everything else unchanged.
func checkModelSpan(t *testing.T, body []byte, r *Request) {
	t.Helper()
	if r.ModelStart < 1 || r.ModelEnd < r.ModelStart || r.ModelEnd >= len(body) ||
		body[r.ModelStart-1] != '"' || body[r.ModelEnd] != '"' {
		t.Fatalf("model span [%d,%d) of a %d-byte body is not inside quotes", r.ModelStart, r.ModelEnd, len(body))
	}
	var s string
	if err := json.Unmarshal(body[r.ModelStart-1:r.ModelEnd+1], &s); err != nil || s != r.Model {
		t.Fatalf("model span holds %q (%v), Model = %q", body[r.ModelStart-1:r.ModelEnd+1], err, r.Model)
	}
	spliced := append(append(append([]byte{}, body[:r.ModelStart]...), `new\"name`...), body[r.ModelEnd:]...)
	var doc, was map[string]any
	if err := decodeJSON(spliced, &doc); err != nil {
		t.Fatalf("spliced body %q is not JSON: %v", spliced, err)
	}
	if doc["model"] != `new"name` {
		t.Fatalf("spliced body's model = %v", doc["model"])
	}
	_ = decodeJSON(body, &was)
	delete(doc, "model")
	delete(was, "model")
	if !reflect.DeepEqual(doc, was) {
		t.Fatalf("splicing the model changed other fields: %v, was %v", doc, was)
	}
}
