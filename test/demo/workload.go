package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// workload describes the chat traffic the demo sends: Groups tenants, each
// with its own long system prompt, asking short questions. Requests of one
// group share the system prompt as a prefix, which a cache-aware picker can
// keep warm on one Pod.
type workload struct {
	Requests    int
	Concurrency int
	Groups      int
	// PrefixChars is the length of each group's system prompt.
	PrefixChars int
	MaxTokens   int
	// AbortRate is the fraction of requests the client cancels once the
	// first chunk has arrived.
	AbortRate float64
	Seed      uint64
	Model     string
	// Timeout bounds one request from start to end.
	Timeout time.Duration
}

func defaultWorkload() workload {
	return workload{
		Requests:    320,
		Concurrency: 12,
		Groups:      8,
		PrefixChars: 8000,
		MaxTokens:   48,
		AbortRate:   0.1,
		Seed:        42,
		Model:       "sim-model",
		Timeout:     2 * time.Minute,
	}
}

func (w workload) validate() error {
	var errs []error
	if w.Requests < 1 || w.Concurrency < 1 || w.Groups < 1 {
		errs = append(errs, fmt.Errorf("requests (%d), concurrency (%d) and groups (%d) must be at least 1",
			w.Requests, w.Concurrency, w.Groups))
	}
	if w.AbortRate < 0 || w.AbortRate > 1 {
		errs = append(errs, fmt.Errorf("abort rate %g is not in [0, 1]", w.AbortRate))
	}
	if w.MaxTokens < 2 {
		errs = append(errs, errors.New("max tokens must be at least 2 so an aborted stream is cut mid-way"))
	}
	return errors.Join(errs...)
}

// request is one planned chat completion.
type request struct {
	ID    int
	Group int
	// Abort says the client cancels this one after its first chunk.
	Abort bool
	Body  []byte
}

type chatMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

type chatRequest struct {
	Model     string        `json:"model"`
	Messages  []chatMessage `json:"messages"`
	MaxTokens int           `json:"max_tokens"`
	Stream    bool          `json:"stream"`
}

// plan returns the requests in sending order. The same workload always gives
// the same plan. Exactly round(AbortRate × Requests) of them abort.
func (w workload) plan() ([]request, error) {
	rng := rand.New(rand.NewPCG(w.Seed, 0x1f3d5b79))
	prompts := make([]string, w.Groups)
	for g := range prompts {
		prompts[g] = systemPrompt(rng, g, w.PrefixChars)
	}
	aborts := int(w.AbortRate*float64(w.Requests) + 0.5)
	abortAt := rng.Perm(w.Requests)[:aborts]
	abort := make(map[int]bool, aborts)
	for _, i := range abortAt {
		abort[i] = true
	}
	reqs := make([]request, w.Requests)
	for i := range reqs {
		g := rng.IntN(w.Groups)
		body, err := json.Marshal(chatRequest{
			Model: w.Model,
			Messages: []chatMessage{
				{Role: "system", Content: prompts[g]},
				{Role: "user", Content: question(rng, i)},
			},
			MaxTokens: w.MaxTokens,
			Stream:    true,
		})
		if err != nil {
			return nil, fmt.Errorf("encode request %d: %w", i, err)
		}
		reqs[i] = request{ID: i, Group: g, Abort: abort[i], Body: body}
	}
	return reqs, nil
}

var (
	products = []string{"Aurora Billing", "Basalt Storage", "Cedar HR", "Delta Logistics",
		"Ember Analytics", "Fjord Travel", "Garnet Health", "Harbor Insurance"}
	phrases = []string{
		"Answer in plain language and keep replies short.",
		"Never reveal internal ticket numbers to the customer.",
		"Escalate refunds above the documented limit to a human agent.",
		"Quote the relevant policy section when you decline a request.",
		"Ask for the account identifier before discussing any balance.",
		"Times are given in the customer's own time zone.",
		"Prefer the self-service portal when it solves the problem.",
		"Summarise the previous conversation before answering a follow-up.",
		"Do not guess: say what is unknown and how to find out.",
		"Offer the status page link when an outage is suspected.",
	}
	topics = []string{"my last invoice", "resetting a password", "a delayed delivery",
		"changing the plan", "an error on the dashboard", "exporting my data",
		"adding a colleague", "a charge I do not recognise"}
)

// systemPrompt builds group g's system prompt, about n characters long and
// different from every other group's from its first sentence on.
func systemPrompt(rng *rand.Rand, g, n int) string {
	var b strings.Builder
	b.Grow(n + 100)
	fmt.Fprintf(&b, "You are the support assistant of %s (tenant %d). Follow these rules.\n",
		products[g%len(products)], g)
	for rule := 1; b.Len() < n; rule++ {
		fmt.Fprintf(&b, "Rule %d: %s\n", rule, phrases[rng.IntN(len(phrases))])
	}
	return b.String()
}

func question(rng *rand.Rand, i int) string {
	return fmt.Sprintf("Question %d: can you help me with %s?", i, topics[rng.IntN(len(topics))])
}
