package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func decodeChat(t *testing.T, body []byte) chatRequest {
	t.Helper()
	var c chatRequest
	if err := json.Unmarshal(body, &c); err != nil {
		t.Fatalf("request body is not JSON: %v", err)
	}
	return c
}

func TestPlanIsReproducible(t *testing.T) {
	w := defaultWorkload()
	a, err := w.plan()
	if err != nil {
		t.Fatal(err)
	}
	b, err := w.plan()
	if err != nil {
		t.Fatal(err)
	}
	// Bodies compare as strings: element-wise []byte comparison is slow.
	asText := cmp.Transformer("text", func(b []byte) string { return string(b) })
	if diff := cmp.Diff(a, b, asText); diff != "" {
		t.Errorf("two plans of one workload differ (-first +second):\n%s", diff)
	}
}

func TestPlanAbortsTheRequestedShare(t *testing.T) {
	cases := map[string]struct {
		requests int
		rate     float64
		want     int
	}{
		"ten percent":    {requests: 320, rate: 0.1, want: 32},
		"rounds":         {requests: 40, rate: 0.1, want: 4},
		"none":           {requests: 50, rate: 0, want: 0},
		"all":            {requests: 7, rate: 1, want: 7},
		"rounds half up": {requests: 5, rate: 0.1, want: 1},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := defaultWorkload()
			w.Requests, w.AbortRate = tc.requests, tc.rate
			reqs, err := w.plan()
			if err != nil {
				t.Fatal(err)
			}
			got := 0
			for _, r := range reqs {
				if r.Abort {
					got++
				}
			}
			if got != tc.want {
				t.Errorf("%d of %d requests abort, want %d", got, tc.requests, tc.want)
			}
		})
	}
}

// A cache-aware picker only has something to find if requests of a group
// share their system prompt and groups share nothing.
func TestPlanSharesPrefixesWithinGroupsOnly(t *testing.T) {
	w := defaultWorkload()
	reqs, err := w.plan()
	if err != nil {
		t.Fatal(err)
	}
	system := map[int]string{}
	for _, r := range reqs {
		c := decodeChat(t, r.Body)
		if len(c.Messages) != 2 || c.Messages[0].Role != "system" || c.Messages[1].Role != "user" {
			t.Fatalf("request %d: messages %+v, want system then user", r.ID, c.Messages)
		}
		if !c.Stream || c.MaxTokens != w.MaxTokens || c.Model != w.Model {
			t.Errorf("request %d: stream=%t max_tokens=%d model=%q", r.ID, c.Stream, c.MaxTokens, c.Model)
		}
		if len(c.Messages[0].Content) < w.PrefixChars {
			t.Errorf("request %d: system prompt of %d chars, want at least %d", r.ID, len(c.Messages[0].Content), w.PrefixChars)
		}
		if prev, ok := system[r.Group]; ok && prev != c.Messages[0].Content {
			t.Errorf("request %d: group %d has two system prompts", r.ID, r.Group)
		}
		system[r.Group] = c.Messages[0].Content
	}
	if len(system) != w.Groups {
		t.Fatalf("%d groups used, want %d", len(system), w.Groups)
	}
	// Simulated KV blocks hold 64 characters: groups must differ in the first.
	firsts := map[string]int{}
	for g, s := range system {
		if other, ok := firsts[s[:64]]; ok {
			t.Errorf("groups %d and %d share their first 64 characters", g, other)
		}
		firsts[s[:64]] = g
	}
}

func TestWorkloadValidate(t *testing.T) {
	cases := map[string]struct {
		edit func(*workload)
		want string
	}{
		"default":           {edit: func(*workload) {}},
		"no requests":       {edit: func(w *workload) { w.Requests = 0 }, want: "must be at least 1"},
		"abort rate over 1": {edit: func(w *workload) { w.AbortRate = 1.5 }, want: "not in [0, 1]"},
		"one token":         {edit: func(w *workload) { w.MaxTokens = 1 }, want: "max tokens"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			w := defaultWorkload()
			tc.edit(&w)
			err := w.validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("validate() = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("validate() = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
