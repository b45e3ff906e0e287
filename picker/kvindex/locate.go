package kvindex

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// DefaultTimeout bounds one /tokenize call.
const DefaultTimeout = 250 * time.Millisecond

// maxTokensResponse bounds a /tokenize answer read: a long context's ids
// with room to spare.
const maxTokensResponse = 16 << 20

// Locator finds where the model servers hold a prompt: it asks one of them
// for the prompt's token ids (vLLM's POST /tokenize renders the chat
// template and tokenizes exactly as serving does) and looks the ids up in
// the index.
type Locator struct {
	// OffloadWeight is what a block held only in an offloading tier counts
	// for against one on the GPU, from 0 to 1 (DefaultOffloadWeight):
	// the server reads it back instead of prefilling it.
	OffloadWeight float64

	index   *Index
	reg     *registry.Registry
	client  *http.Client
	timeout time.Duration
	next    atomic.Uint32
	bufs    sync.Pool // *buffers
	calls   atomic.Int64
	failed  atomic.Int64
	skipped atomic.Int64
	now     func() time.Time

	mu      sync.Mutex
	failing map[*registry.Worker]*failing // only workers whose last call failed
}

// failing is the run of failed /tokenize calls of one worker. After
// breakAfter in a row the worker is left out until until, for a pause that
// doubles with each further failure, from minPause up to maxPause; then one
// call tries it again. A success forgets the run.
type failing struct {
	n     int
	until time.Time
}

const (
	breakAfter = 3
	minPause   = time.Second
	maxPause   = 30 * time.Second
)

type buffers struct {
	body   bytes.Buffer
	tokens []uint32
	holds  []Hold
}

// DefaultOffloadWeight is Locator.OffloadWeight unless set: reading a
// block back from host memory takes a fraction of prefilling it.
const DefaultOffloadWeight = 0.8

// share is the part of the prompt's full blocks the hold covers, its
// offloaded blocks counting offload each.
func (h Hold) share(offload float64) float64 {
	return (float64(h.Blocks-h.Offloaded) + offload*float64(h.Offloaded)) / float64(h.Prompt)
}

// NewLocator returns a locator that tokenizes on the registry's workers
// with the given timeout (DefaultTimeout when <= 0).
func NewLocator(ix *Index, reg *registry.Registry, timeout time.Duration) *Locator {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	return &Locator{
		OffloadWeight: DefaultOffloadWeight,
		index:         ix, reg: reg, timeout: timeout, now: time.Now,
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}},
		failing: map[*registry.Worker]*failing{},
	}
}

// Calls returns the /tokenize calls made, how many of them failed, and how
// many lookups were not made because every server's calls kept failing.
func (l *Locator) Calls() (calls, failed, skipped int64) {
	return l.calls.Load(), l.failed.Load(), l.skipped.Load()
}

// Locate fills dst with the servers' account of the parsed request's prompt,
// for the model the request names (after any rewrite). A gRPC request that
// sends its token ids (input_ids) is looked up by them, with no /tokenize
// call. It reports false, leaving dst alone, when it cannot tell: a
// request other than a chat, a single-prompt completion or a gRPC one with
// token ids, a salted prompt or one with media (an image,
// audio, a file; a gRPC Generate's mm_inputs) while the servers' events have not shown that they key
// blocks by their extra keys (SaltKeyed), no blocks stored yet, or a
// /tokenize call that failed.
func (l *Locator) Locate(ctx context.Context, model string, r *openai.Request, dst *policy.Shared) (bool, error) {
	if r.Kind.GRPC() {
		if len(r.InputIDs) == 0 || !l.index.Sized() || r.Media && !l.index.SaltKeyed() {
			return false, nil
		}
		b := l.buffers()
		defer l.bufs.Put(b)
		b.tokens = r.TokenIDs(b.tokens[:0])
		l.lookup(b, "", "", dst)
		return true, nil
	}
	if len(r.Input) == 0 || !l.index.Sized() {
		return false, nil
	}
	salt, ok := cacheSalt(r.CacheSalt)
	if !ok || (salt != "" || r.Media) && !l.index.SaltKeyed() {
		return false, nil
	}
	var field string
	switch {
	case r.Kind == openai.ChatCompletions:
		field = "messages"
	case r.Kind == openai.Completions && r.Input[0] == '"':
		field = "prompt"
	default:
		return false, nil
	}
	w, left := l.worker(model)
	if w == nil {
		if left {
			l.skipped.Add(1)
		}
		return false, nil
	}
	b := l.buffers()
	defer l.bufs.Put(b)
	b.body.Reset()
	writeBody(&b.body, model, field, r)
	l.calls.Add(1)
	tokens, err := l.tokenize(ctx, w.Address(), b.body.Bytes(), b.tokens)
	if err != nil {
		if ctx.Err() != nil { // the stream ended: the server is not to blame
			return false, ctx.Err()
		}
		l.failed.Add(1)
		l.record(w, false)
		return false, fmt.Errorf("tokenize on %s: %w", w.Address(), err)
	}
	l.record(w, true)
	b.tokens = tokens
	adapter := ""
	if l.adapter(model) {
		adapter = model
	}
	l.lookup(b, adapter, salt, dst)
	return true, nil
}

func (l *Locator) buffers() *buffers {
	if b, ok := l.bufs.Get().(*buffers); ok {
		return b
	}
	return &buffers{}
}

// lookup fills dst with the holds of b.tokens in the index.
func (l *Locator) lookup(b *buffers, adapter, salt string, dst *policy.Shared) {
	b.holds = l.index.Lookup(b.tokens, adapter, salt, b.holds)
	dst.Holds = dst.Holds[:0]
	for _, h := range b.holds {
		if h.Blocks > 0 {
			dst.Holds = append(dst.Holds, policy.SharedHold{Worker: h.Worker, Share: h.share(l.OffloadWeight)})
		}
	}
}

// adapter reports whether model is a LoRA adapter: blocks are held under
// its name, or a server lists it as an adapter. Its prompt is looked up
// under its name even before any server has stored a block of it: the
// servers key an adapter's blocks apart from its base model's, so the
// base's blocks of the same tokens save it nothing.
func (l *Locator) adapter(model string) bool {
	if l.index.Adapter(model) {
		return true
	}
	for _, w := range l.reg.Workers() {
		if m := w.Metrics(); m != nil && m.Served.Serves(model) && !m.Served.ServesBase(model) {
			return true
		}
	}
	return false
}

// worker returns the next worker to tokenize model's prompt on, round
// robin over the registry, past the workers whose complete model list
// lacks model (a server answers 404 for a model it does not serve, which
// would count against it) and those left out for failing; nil when there is
// none, left telling whether some live worker was left out for failing.
func (l *Locator) worker(model string) (w *registry.Worker, left bool) {
	ws := l.reg.Workers()
	for range ws {
		w := ws[int(l.next.Add(1))%len(ws)]
		if !w.Live() {
			continue
		}
		if m := w.Metrics(); m != nil && m.Served != nil && m.Served.Complete && !m.Served.Serves(model) {
			continue
		}
		if l.resting(w) {
			left = true
			continue
		}
		return w, false
	}
	return nil, left
}

// resting reports whether w is left out for now.
func (l *Locator) resting(w *registry.Worker) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := l.failing[w]
	return f != nil && l.now().Before(f.until)
}

// record notes how a call to w went. The map holds only workers whose last
// call failed, and a removed worker leaves it at the next failure.
func (l *Locator) record(w *registry.Worker, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		delete(l.failing, w)
		return
	}
	for x := range l.failing {
		if x.Removed() {
			delete(l.failing, x)
		}
	}
	f := l.failing[w]
	if f == nil {
		f = &failing{}
		l.failing[w] = f
	}
	f.n++
	if f.n >= breakAfter {
		f.until = l.now().Add(min(minPause<<(f.n-breakAfter), maxPause))
	}
}

// cacheSalt returns the salt a request's raw cache_salt string stands for
// (its JSON escapes undone), and false when the escapes do not decode.
func cacheSalt(raw []byte) (string, bool) {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw), true
	}
	var s string
	err := json.Unmarshal(append(append([]byte{'"'}, raw...), '"'), &s)
	return s, err == nil
}

// writeBody writes the /tokenize request for the prompt: the model and the
// prompt's field as the client sent it (and a chat's tools, which templates
// render).
func writeBody(b *bytes.Buffer, model, field string, r *openai.Request) {
	m, _ := json.Marshal(model) // a string always marshals
	b.WriteString(`{"model":`)
	b.Write(m)
	b.WriteString(`,"`)
	b.WriteString(field)
	b.WriteString(`":`)
	b.Write(r.Input)
	if len(r.Tools) > 0 {
		b.WriteString(`,"tools":`)
		b.Write(r.Tools)
	}
	b.WriteByte('}')
}

func (l *Locator) tokenize(ctx context.Context, addr string, body []byte, dst []uint32) ([]uint32, error) {
	ctx, cancel := context.WithTimeout(ctx, l.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/tokenize", bytes.NewReader(body))
	if err != nil {
		return dst, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return dst, err
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxTokensResponse))
	if err != nil {
		return dst, err
	}
	if resp.StatusCode != http.StatusOK {
		return dst, fmt.Errorf("status %d: %.200s", resp.StatusCode, data)
	}
	return ParseTokens(data, dst)
}

// ParseTokens reads the "tokens" array of a /tokenize answer into dst[:0].
// An answer without one has no tokens.
func ParseTokens(data []byte, dst []uint32) ([]uint32, error) {
	v := struct {
		Tokens []uint32 `json:"tokens"`
	}{Tokens: dst[:0]}
	if err := json.Unmarshal(data, &v); err != nil {
		return dst[:0], fmt.Errorf("tokenize answer: %w", err)
	}
	return v.Tokens, nil
}
