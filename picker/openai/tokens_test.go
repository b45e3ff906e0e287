package openai

import (
	"strings"
	"testing"
)

// A prompt's estimated tokens count the text of its strings, 4 bytes a
// token with an escape one character, and a token array's ids one each; an
// image, tools, tool calls and role markers count none, so a chat with a
// large image is as long as its words.
func TestTokensCountTheTextAlone(t *testing.T) {
	image := strings.Repeat("QUJD", 100_000) // 400 KB of base64
	for name, tc := range map[string]struct {
		kind Kind
		body string
		want int
	}{
		"chat string": {kind: ChatCompletions, want: 4,
			body: `{"model":"m","messages":[{"role":"system","content":"12345678"},{"role":"user","content":"abcdefgh"}]}`},
		"escapes are one character each": {kind: ChatCompletions, want: 2,
			body: `{"model":"m","messages":[{"role":"user","content":"\n\n\n\n\u00e9\u00e9\u00e9\u00e9"}]}`},
		"a large image counts none": {kind: ChatCompletions, want: 2,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Describe!"},{"type":"image_url","image_url":{"url":"data:image/png;base64,` + image + `"}}]}]}`},
		"tools and tool calls count none": {kind: ChatCompletions, want: 1,
			body: `{"model":"m","tools":[{"type":"function","function":{"name":"weather","description":"a long description of the tool"}}],"messages":[{"role":"assistant","content":"abcd","tool_calls":[{"id":"1","type":"function","function":{"name":"weather","arguments":"{}"}}]}]}`},
		"a token array counts its ids": {kind: Completions, want: 5,
			body: `{"model":"m","prompt":[101, 2023, 2003, 1037, 102]}`},
		"token arrays count their ids": {kind: Completions, want: 4,
			body: `{"model":"m","prompt":[[1,2,3],[ 4 ],[]]}`},
		"prompt strings": {kind: Completions, want: 3,
			body: `{"model":"m","prompt":["abcdef","ghijkl"]}`},
		"the last prompt given counts": {kind: Completions, want: 1,
			body: `{"model":"m","prompt":"abcdefghijklmnop","prompt":"abcd"}`},
		"responses instructions and input": {kind: Responses, want: 3,
			body: `{"model":"m","instructions":"abcdefgh","input":"abcd"}`},
	} {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := Parse(tc.kind, []byte(tc.body), &r); err != nil {
				t.Fatal(err)
			}
			if r.Tokens != tc.want {
				t.Errorf("Tokens = %d, want %d", r.Tokens, tc.want)
			}
		})
	}
}
