package server

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// sse writes server-sent events and applies the stream faults: each event
// counts as one chunk.
type sse struct {
	ctx    context.Context
	w      http.ResponseWriter
	rc     *http.ResponseController
	faults faults.Config
	sent   int
	ok     bool // false once a fault or a write error ended the stream
}

func newSSE(ctx context.Context, w http.ResponseWriter, fc faults.Config) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	e := &sse{ctx: ctx, w: w, rc: http.NewResponseController(w), faults: fc, ok: true}
	_ = e.rc.Flush()
	return e
}

// event writes one "data: " event. It reports whether the stream goes on.
func (e *sse) event(data []byte) bool {
	if !e.ok {
		return false
	}
	if !holdBack(e.ctx, e.w, e.faults, e.sent) {
		e.ok = false
		return false
	}
	buf := make([]byte, 0, len(data)+8)
	buf = append(buf, "data: "...)
	buf = append(buf, data...)
	buf = append(buf, "\n\n"...)
	if _, err := e.w.Write(buf); err != nil {
		e.ok = false
		return false
	}
	if err := e.rc.Flush(); err != nil {
		e.ok = false
		return false
	}
	e.sent++
	return true
}

func (e *sse) json(v any) bool {
	data, err := json.Marshal(v)
	if err != nil {
		e.ok = false
		return false
	}
	return e.event(data)
}

// stream serves a streamed request: one event per output token, a usage
// event if asked for, then [DONE]. If the client leaves, the stream just
// ends; if the engine stops first, an error event and [DONE] end it, as
// vLLM ends a stream its engine failed.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, rn *run, fc faults.Config) {
	out := newSSE(ctx, w, fc)
	for {
		sts, done, aborted := rn.statuses()
		rn.record(s.metrics, sts)
		for i, st := range sts {
			for rn.sent[i] < st.Generated {
				if !out.json(rn.chunk(i, rn.sent[i])) {
					return
				}
				rn.sent[i]++
			}
		}
		if aborted {
			if ctx.Err() == nil && out.json(stoppedMidway()) {
				out.event([]byte("[DONE]"))
			}
			return
		}
		if done {
			if rn.includeUsage && !out.json(rn.usageChunk(rn.usage(sts))) {
				return
			}
			out.event([]byte("[DONE]"))
			return
		}
		select {
		case <-rn.notify:
		case <-ctx.Done():
			return
		}
	}
}

// chunk is the event for token t of choice i. A chat's first event also
// carries the assistant role; the last one carries the finish reason.
func (rn *run) chunk(i, t int) any {
	var finish *string
	if t == rn.maxTokens-1 {
		finish = finishLength()
	}
	text := outputText(i, t, t+1)
	if !rn.chat {
		return openai.Completion{
			ID: rn.id, Object: openai.ObjectCompletion, Created: rn.created, Model: rn.model(),
			Choices: []openai.CompletionChoice{{Index: i, Text: text, FinishReason: finish}},
		}
	}
	delta := openai.Delta{Content: text}
	if t == 0 {
		delta.Role = "assistant"
	}
	return openai.ChatCompletionChunk{
		ID: rn.id, Object: openai.ObjectChatChunk, Created: rn.created, Model: rn.model(),
		Choices: []openai.ChatChunkChoice{{Index: i, Delta: delta, FinishReason: finish}},
	}
}

// usageChunk is the final event of a stream asked to include usage: no
// choices, only the totals.
func (rn *run) usageChunk(u *openai.Usage) any {
	if rn.chat {
		return openai.ChatCompletionChunk{
			ID: rn.id, Object: openai.ObjectChatChunk, Created: rn.created, Model: rn.model(),
			Choices: []openai.ChatChunkChoice{}, Usage: u,
		}
	}
	return openai.Completion{
		ID: rn.id, Object: openai.ObjectCompletion, Created: rn.created, Model: rn.model(),
		Choices: []openai.CompletionChoice{}, Usage: u,
	}
}
