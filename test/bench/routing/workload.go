package routing

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Message is one chat message of a request.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Request is one chat completion a workload sends.
type Request struct {
	// At is the arrival time in simulated time from the start of the run
	// (open-loop workloads).
	At       time.Duration
	Messages []Message
	// Objective, when set, is sent as x-gateway-inference-objective.
	Objective string
	// Model is the request's model, a LoRA adapter's name for example;
	// empty is the base model.
	Model string
}

// Kind says how a workload's requests are issued.
type Kind int

const (
	// Open sends each request at its At time, whatever the answers.
	Open Kind = iota
	// Sessions runs each session's turns one after the other, a think time
	// of 0.5 to 1.5 × Think after each answer, sessions in parallel.
	Sessions
	// Burst sends Warm one by one, then every request of Requests at once.
	Burst
)

// Workload is a named set of requests and the way they are issued.
type Workload struct {
	Name string
	Kind Kind
	// Rate is the mean arrival rate in requests per simulated second (Open).
	Rate     float64
	Requests []Request
	// Sessions and Think drive a Sessions workload; Think, the mean think
	// time, is simulated time.
	Sessions [][]Request
	Think    time.Duration
	// Warm precedes a Burst.
	Warm []Request
	// Pin, when set, routes every request to the pod it names (an index
	// into the cluster's pods) through the gateway's subset hint, whatever
	// the picker's policy: a fixed placement to measure policies against.
	Pin func(Request) int
}

// Len returns how many requests the workload sends.
func (w *Workload) Len() int {
	n := len(w.Requests) + len(w.Warm)
	for _, s := range w.Sessions {
		n += len(s)
	}
	return n
}

// order returns the requests in the order they are issued, for the oracle.
func (w *Workload) order() []Request {
	out := append([]Request(nil), w.Warm...)
	out = append(out, w.Requests...)
	// Sessions share nothing with each other: any interleaving gives the
	// same oracle, so session by session will do.
	for _, s := range w.Sessions {
		out = append(out, s...)
	}
	return out
}

// words is the vocabulary of generated text.
var words = strings.Fields("the pod routes each request to a warm cache and keeps load even while " +
	"prompts share long system instructions with many short questions about tools data and plans")

// prose returns n bytes of text determined by seed.
func prose(seed string, n int) string {
	h := fnv.New64a()
	h.Write([]byte(seed))
	r := rand.New(rand.NewPCG(h.Sum64(), 7))
	var b strings.Builder
	b.Grow(n + 16)
	b.WriteString(seed)
	for b.Len() < n {
		b.WriteByte(' ')
		b.WriteString(words[r.IntN(len(words))])
	}
	return b.String()[:n]
}

// poisson returns n arrival times at rate per second.
func poisson(r *rand.Rand, n int, rate float64) []time.Duration {
	out := make([]time.Duration, n)
	t := 0.0
	for i := range out {
		t += r.ExpFloat64() / rate
		out[i] = time.Duration(t * float64(time.Second))
	}
	return out
}

// SharedPrefixSpec shapes the shared-prefix workload.
type SharedPrefixSpec struct {
	Groups       int // distinct system prompts
	SystemBytes  int
	QuestionByte int
	Requests     int
	Rate         float64
	Seed         uint64
}

// SharedPrefix is groups of prompts sharing a long system prompt, each with
// a short question of its own, arriving as a Poisson process. Groups are
// drawn uniformly.
func SharedPrefix(s SharedPrefixSpec) *Workload {
	r := rand.New(rand.NewPCG(s.Seed, 1))
	systems := make([]string, s.Groups)
	for i := range systems {
		systems[i] = prose(fmt.Sprintf("system prompt of tenant %d.", i), s.SystemBytes)
	}
	at := poisson(r, s.Requests, s.Rate)
	w := &Workload{Name: fmt.Sprintf("shared-prefix@%g", s.Rate), Kind: Open, Rate: s.Rate}
	for i := range s.Requests {
		g := r.IntN(s.Groups)
		w.Requests = append(w.Requests, Request{At: at[i], Messages: []Message{
			{Role: "system", Content: systems[g]},
			{Role: "user", Content: prose(fmt.Sprintf("question %d of tenant %d:", i, g), s.QuestionByte)},
		}})
	}
	return w
}

// NoSharing is prompts with nothing in common, arriving as a Poisson process.
func NoSharing(requests, bytes int, rate float64, seed uint64) *Workload {
	r := rand.New(rand.NewPCG(seed, 2))
	at := poisson(r, requests, rate)
	w := &Workload{Name: fmt.Sprintf("no-sharing@%g", rate), Kind: Open, Rate: rate}
	for i := range requests {
		w.Requests = append(w.Requests, Request{At: at[i], Messages: []Message{
			{Role: "user", Content: prose(fmt.Sprintf("%d unrelated request:", i), bytes)},
		}})
	}
	return w
}

// MultiTurn is sessions whose history grows: each turn resends the whole
// conversation plus a new user message. Each session has a system prompt
// of its own.
func MultiTurn(sessions, turns, systemBytes, userBytes, replyBytes int, think time.Duration) *Workload {
	return conversations("multi-turn", func(s int) string {
		return prose(fmt.Sprintf("session %d instructions:", s), systemBytes)
	}, sessions, turns, userBytes, replyBytes, think)
}

// OneSystemPrompt is MultiTurn with the system prompt every session of an
// application shares.
func OneSystemPrompt(sessions, turns, systemBytes, userBytes, replyBytes int, think time.Duration) *Workload {
	sys := prose("application instructions:", systemBytes)
	return conversations("one-system-prompt", func(int) string { return sys }, sessions, turns, userBytes, replyBytes, think)
}

// conversations is sessions of turns under the system prompts system gives.
func conversations(name string, system func(session int) string, sessions, turns, userBytes, replyBytes int, think time.Duration) *Workload {
	w := &Workload{Name: name, Kind: Sessions, Think: think}
	for s := range sessions {
		hist := []Message{{Role: "system", Content: system(s)}}
		var reqs []Request
		for t := range turns {
			hist = append(hist, Message{Role: "user", Content: prose(fmt.Sprintf("session %d turn %d:", s, t), userBytes)})
			reqs = append(reqs, Request{Messages: append([]Message(nil), hist...)})
			hist = append(hist, Message{Role: "assistant", Content: prose(fmt.Sprintf("answer %d/%d:", s, t), replyBytes)})
		}
		w.Sessions = append(w.Sessions, reqs)
	}
	return w
}

// BurstOnPrefix warms one pod with a prefix, then sends n requests on that
// prefix at the same instant.
func BurstOnPrefix(n, systemBytes, questionBytes int) *Workload {
	sys := prose("burst system prompt:", systemBytes)
	req := func(i int) Request {
		return Request{Messages: []Message{
			{Role: "system", Content: sys},
			{Role: "user", Content: prose(fmt.Sprintf("burst question %d:", i), questionBytes)},
		}}
	}
	w := &Workload{Name: "burst", Kind: Burst, Warm: []Request{req(-1)}}
	for i := range n {
		w.Requests = append(w.Requests, req(i))
	}
	return w
}

// promptText is the text the simulator's chat template makes of messages:
// each as "<|role|>\n" + content + "\n", then "<|assistant|>\n".
func promptText(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<|" + m.Role + "|>\n" + m.Content + "\n")
	}
	b.WriteString("<|assistant|>\n")
	return b.String()
}

// bytesPerToken is the simulator's fixed tokenizer rule.
const bytesPerToken = 4

// Oracle is the prefix-cache hit rate a perfect router with unbounded
// caches reaches on w: every full block of a prompt that an earlier prompt
// also began with is a hit (the last token is always computed, as in the
// simulator). blockSize is in tokens.
func Oracle(w *Workload, blockSize int) float64 {
	blockBytes := blockSize * bytesPerToken
	seen := map[uint64]bool{}
	var prompt, cached int64
	for _, r := range w.order() {
		text := promptText(r.Messages)
		tokens := (len(text) + bytesPerToken - 1) / bytesPerToken
		h := fnv.New64a()
		hit, missed := 0, false
		for i := 0; (i+1)*blockBytes <= len(text); i++ {
			h.Write([]byte(text[i*blockBytes : (i+1)*blockBytes]))
			k := h.Sum64()
			if !missed && seen[k] {
				hit++
			} else {
				missed = true
			}
			seen[k] = true
		}
		hit = min(hit, (tokens-1)/blockSize)
		prompt += int64(tokens)
		cached += int64(hit * blockSize)
	}
	if prompt == 0 {
		return 0
	}
	return float64(cached) / float64(prompt)
}

// PriorityMix is two open-loop streams of unrelated prompts: interactive
// requests at rateI and batch requests at rateB (requests per simulated
// second) for window, each tagged with its objective.
func PriorityMix(rateI, rateB float64, window time.Duration, bytes int, seed uint64) *Workload {
	r := rand.New(rand.NewPCG(seed, 5))
	w := &Workload{Name: fmt.Sprintf("priority-mix@%g+%g", rateI, rateB), Kind: Open, Rate: rateI + rateB}
	add := func(objective string, rate float64) {
		if rate <= 0 {
			return
		}
		n := int(rate * window.Seconds())
		for i, at := range poisson(r, n, rate) {
			w.Requests = append(w.Requests, Request{At: at, Objective: objective, Messages: []Message{
				{Role: "user", Content: prose(fmt.Sprintf("%s request %d:", objective, i), bytes)},
			}})
		}
	}
	add("interactive", rateI)
	add("batch", rateB)
	sort.Slice(w.Requests, func(i, j int) bool { return w.Requests[i].At < w.Requests[j].At })
	return w
}

// MultiLoRASpec shapes the multi-lora workload.
type MultiLoRASpec struct {
	Adapters      []string // adapter names, the most popular first
	Zipf          float64  // popularity exponent, > 1
	SystemBytes   int      // a system prompt per adapter
	QuestionBytes int
	Requests      int
	Rate          float64
	Seed          uint64
}

// MultiLoRA is requests for LoRA adapters of Zipf popularity, each with its
// adapter's system prompt and a question of its own, arriving as a Poisson
// process.
func MultiLoRA(s MultiLoRASpec) *Workload {
	r := rand.New(rand.NewPCG(s.Seed, 6))
	z := rand.NewZipf(r, s.Zipf, 1, uint64(len(s.Adapters)-1))
	at := poisson(r, s.Requests, s.Rate)
	w := &Workload{Name: fmt.Sprintf("multi-lora@%g", s.Rate), Kind: Open, Rate: s.Rate}
	for i := range s.Requests {
		a := s.Adapters[z.Uint64()]
		w.Requests = append(w.Requests, Request{At: at[i], Model: a, Messages: []Message{
			{Role: "system", Content: prose(fmt.Sprintf("instructions of adapter %s.", a), s.SystemBytes)},
			{Role: "user", Content: prose(fmt.Sprintf("question %d for %s:", i, a), s.QuestionBytes)},
		}})
	}
	return w
}
