package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/engine"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/faults"
	"github.com/inferpick/inferpick/cmd/vllm-sim/internal/openai"
)

// job is one parsed generation request.
type job struct {
	chat         bool
	model        string // echoed in responses
	lora         string // adapter to run with; empty for the base model
	salt         string // cache_salt; empty for none
	prompts      []string
	maxTokens    int
	stream       bool
	includeUsage bool
	remote       bool // a prefill pod computed the prompt
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, w)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	req, err := openai.ParseCompletion(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	s.serve(w, r, body, s.newJob(false, &req.Common, req.Prompt))
}

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	body, err := readBody(r, w)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	req, err := openai.ParseChat(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return
	}
	s.serve(w, r, body, s.newJob(true, &req.Common, []string{req.PromptText()}))
}

func (s *Server) newJob(chat bool, c *openai.Common, prompts []string) job {
	salt := ""
	if c.CacheSalt != nil {
		salt = *c.CacheSalt
	}
	limit := c.RequestedMaxTokens()
	if limit == 0 {
		limit = s.cfg.DefaultMaxTokens
	}
	return job{
		chat:         chat,
		model:        c.Model,
		prompts:      prompts,
		maxTokens:    min(limit, s.cfg.MaxTokensCap),
		stream:       c.Stream,
		includeUsage: c.IncludeUsage(),
		salt:         salt,
	}
}

// run is a job in flight: its sequences and what the client has been sent.
// Each prompt is a sequence of its own, placed on an engine of its own, as
// vLLM's data-parallel balancer places each prompt of a batch, and timed on
// its own, as vLLM's metrics count each prompt as a request.
type run struct {
	job
	id      string
	created int64
	start   time.Time
	notify  chan struct{}
	seqs    []*engine.Sequence
	engines []int       // the engine each sequence runs on
	firstAt []time.Time // each sequence's first token, zero before it
	ended   []bool      // each sequence's end recorded
	sent    []int       // tokens sent (streaming) per sequence
}

// serve runs j, whose request body is body: first its prefill on the
// prefill pod it names, if any, then the rest here.
func (s *Server) serve(w http.ResponseWriter, r *http.Request, body []byte, j job) {
	remote, goOn := s.sidecar(w, r, body)
	if !goOn {
		return
	}
	j.remote = remote
	echo, lora, ok := s.resolve(j.model)
	if !ok {
		writeError(w, http.StatusNotFound, "model", "The model `"+j.model+"` does not exist.")
		return
	}
	j.model, j.lora = echo, lora
	fc, failWith := s.cfg.Faults.Roll()
	if failWith != 0 {
		s.injected.Add(1)
		writeError(w, failWith, "", "simulated failure")
		return
	}
	ctx := r.Context()
	run, err := s.start(ctx, j)
	if err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, engine.ErrStopped) {
			status = http.StatusServiceUnavailable
		}
		writeError(w, status, "", err.Error())
		return
	}
	defer run.abort()

	if j.stream {
		s.stream(ctx, w, run, fc)
		return
	}
	if !s.wait(ctx, run) {
		if ctx.Err() == nil {
			writeError(w, http.StatusServiceUnavailable, "", errStoppedMidway)
		}
		return
	}
	if !holdBack(ctx, w, fc, 0) {
		return
	}
	if j.chat {
		writeJSON(w, http.StatusOK, run.chatResponse())
	} else {
		writeJSON(w, http.StatusOK, run.completionResponse())
	}
}

// start submits every prompt of j. On error nothing stays submitted.
func (s *Server) start(ctx context.Context, j job) (*run, error) {
	prefix := "cmpl-"
	if j.chat {
		prefix = "chatcmpl-"
	}
	now := time.Now()
	rn := &run{
		job:     j,
		id:      fmt.Sprintf("%s%016x", prefix, s.ids.Add(1)),
		created: now.Unix(),
		start:   now,
		notify:  make(chan struct{}, 1),
		sent:    make([]int, len(j.prompts)),
		firstAt: make([]time.Time, len(j.prompts)),
		ended:   make([]bool, len(j.prompts)),
	}
	for _, p := range j.prompts {
		e := s.pickEngine() // after the prompts before it were queued
		seq, err := s.cfg.Engines[e].Submit(ctx, engine.Request{Prompt: p, MaxTokens: j.maxTokens, LoRA: j.lora, CacheSalt: j.salt, RemotePrefill: j.remote, Notify: rn.notify})
		if err != nil {
			rn.abort()
			return nil, fmt.Errorf("submit: %w", err)
		}
		rn.seqs, rn.engines = append(rn.seqs, seq), append(rn.engines, e)
	}
	return rn, nil
}

// record records each sequence's first token and end not recorded yet.
func (rn *run) record(m *metrics, sts []engine.Status) {
	for i, st := range sts {
		if st.Generated > 0 && rn.firstAt[i].IsZero() {
			rn.firstAt[i] = m.firstToken(rn.engines[i], rn.start, st)
		}
		if st.Done && !rn.ended[i] {
			rn.ended[i] = true
			m.finished(rn.engines[i], rn.start, rn.firstAt[i], st)
		}
	}
}

func (rn *run) abort() {
	for _, seq := range rn.seqs {
		seq.Abort()
	}
}

// statuses returns every sequence's status and whether all are done and
// whether any was aborted.
func (rn *run) statuses() (sts []engine.Status, done, aborted bool) {
	done = true
	for _, seq := range rn.seqs {
		st := seq.Status()
		sts = append(sts, st)
		done = done && st.Done
		aborted = aborted || st.Aborted
	}
	return sts, done, aborted
}

// wait blocks until every sequence is done, recording latencies. It reports
// false if the client left or the engine stopped.
func (s *Server) wait(ctx context.Context, rn *run) bool {
	for {
		sts, done, aborted := rn.statuses()
		rn.record(s.metrics, sts)
		if aborted {
			return false
		}
		if done {
			return true
		}
		select {
		case <-rn.notify:
		case <-ctx.Done():
			return false
		}
	}
}

// holdBack applies the stall and drop faults once sent chunks have gone out.
// It reports whether the response may go on.
func holdBack(ctx context.Context, w http.ResponseWriter, fc faults.Config, sent int) bool {
	switch {
	case fc.StallAfterChunks != faults.Off && sent >= fc.StallAfterChunks:
		_ = http.NewResponseController(w).Flush()
		<-ctx.Done()
		return false
	case fc.DropAfterChunks != faults.Off && sent >= fc.DropAfterChunks:
		rc := http.NewResponseController(w)
		_ = rc.Flush()
		if conn, _, err := rc.Hijack(); err == nil {
			_ = conn.Close()
		}
		return false
	}
	return true
}

func (rn *run) usage(sts []engine.Status) *openai.Usage {
	var u openai.Usage
	cached := 0
	for _, st := range sts {
		u.PromptTokens += st.PromptTokens
		u.CompletionTokens += st.Generated
		cached += st.CachedTokens
	}
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.PromptTokensDetails = &openai.PromptTokensDetails{CachedTokens: cached}
	return &u
}

func (rn *run) completionResponse() openai.Completion {
	sts, _, _ := rn.statuses()
	resp := openai.Completion{ID: rn.id, Object: openai.ObjectCompletion, Created: rn.created, Model: rn.model(), Usage: rn.usage(sts)}
	for i, st := range sts {
		resp.Choices = append(resp.Choices, openai.CompletionChoice{
			Index: i, Text: outputText(i, 0, st.Generated), FinishReason: finishLength(),
		})
	}
	return resp
}

func (rn *run) chatResponse() openai.ChatCompletion {
	sts, _, _ := rn.statuses()
	resp := openai.ChatCompletion{ID: rn.id, Object: openai.ObjectChat, Created: rn.created, Model: rn.model(), Usage: rn.usage(sts)}
	for i, st := range sts {
		resp.Choices = append(resp.Choices, openai.ChatChoice{
			Index:        i,
			Message:      openai.ChatMessage{Role: "assistant", Content: outputText(i, 0, st.Generated)},
			FinishReason: finishLength(),
		})
	}
	return resp
}

// model is the name echoed in responses: the adapter, or the first served
// name of the base model.
func (rn *run) model() string { return rn.job.model }

func finishLength() *string {
	reason := "length"
	return &reason
}

// words are the simulated output tokens, each BytesPerToken bytes long.
var words = [...]string{" the", " and", " for", " you", " are", " was", " not", " but", " all", " can", " one", " out"}

// outputText returns tokens [from, to) of choice i.
func outputText(i, from, to int) string {
	var b []byte
	for t := from; t < to; t++ {
		b = append(b, words[(i*5+t)%len(words)]...)
	}
	return string(b)
}
