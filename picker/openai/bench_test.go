package openai

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// words is the vocabulary of generated prompts: mostly plain English, with a
// line break, a quotation or a word that is not ASCII about every tenth word,
// as in real prompts.
var words = []string{
	"the", "model", "routes", "each", "request", "to", "a", "warm", "cache", "and",
	"prefix", "match", "longest", "pod", "token", "with", "of", "every", "query", "is",
	"serving", "fast", "when", "it", "can", "reuse", "work", "already", "done", "by",
	"line\n", "\"quoted\"", "café", "日本", "end.\n\n", "so", "that", "we", "keep", "going",
}

// denseWords makes text where almost every word needs escaping or is not
// ASCII: a worst case for the string scanner.
var denseWords = []string{"line\n", "\"q\"", "café", "tab\t", "naïve", "a\\b", "日本", "x"}

// text returns n bytes or a little more of deterministic prose.
func text(vocab []string, seed uint32, n int) string {
	var b strings.Builder
	for b.Len() < n {
		seed = seed*1664525 + 1013904223
		b.WriteString(vocab[seed>>16%uint32(len(vocab))])
		b.WriteByte(' ')
	}
	return b.String()
}

// chatBody returns a chat request of about size bytes: a system prompt,
// tools, and alternating user and assistant turns of about 400 bytes.
func chatBody(vocab []string, size int) []byte {
	type message struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	req := struct {
		Model    string    `json:"model"`
		Messages []message `json:"messages"`
		Tools    []any     `json:"tools"`
		Stream   bool      `json:"stream"`
	}{Model: "meta-llama/Llama-3.1-8B-Instruct", Stream: true}
	req.Tools = []any{map[string]any{"type": "function", "function": map[string]any{"name": "lookup", "parameters": map[string]any{"type": "object"}}}}
	req.Messages = append(req.Messages, message{Role: "system", Content: text(vocab, 1, 300)})
	for i := uint32(0); ; i++ {
		body, err := json.Marshal(req)
		if err != nil {
			panic(err)
		}
		if len(body) >= size {
			return body
		}
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		req.Messages = append(req.Messages, message{Role: role, Content: text(vocab, i+2, min(400, size-len(body)))})
	}
}

func completionsBody(size int) []byte {
	body, err := json.Marshal(map[string]any{"model": "m", "prompt": text(words, 7, size), "max_tokens": 64})
	if err != nil {
		panic(err)
	}
	return body
}

func benchParse(b *testing.B, kind Kind, body []byte) {
	var r Request
	if err := Parse(kind, body, &r); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if err := Parse(kind, body, &r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseChat(b *testing.B) {
	for _, size := range []int{1 << 10, 32 << 10, 400 << 10} {
		body := chatBody(words, size)
		b.Run(fmt.Sprintf("%dKB", size>>10), func(b *testing.B) { benchParse(b, ChatCompletions, body) })
	}
	body := chatBody(denseWords, 32<<10)
	b.Run("32KB-dense-escapes", func(b *testing.B) { benchParse(b, ChatCompletions, body) })
}

func BenchmarkParseCompletions(b *testing.B) {
	benchParse(b, Completions, completionsBody(32<<10))
}

// BenchmarkParseGRPC reads vLLM gRPC Generate requests: 32 KB of text, and
// the 8,000 token ids a router that tokenizes sends for about as much.
func BenchmarkParseGRPC(b *testing.B) {
	bench := func(b *testing.B, body []byte) {
		var r Request
		if err := ParseGRPC(GRPCGenerate, body, &r); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := ParseGRPC(GRPCGenerate, body, &r); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("text-32KB", func(b *testing.B) { bench(b, generateText(text(words, 7, 32<<10), true)) })
	body := frame(embedded(genTokenized, tokenizedMsg("", packedIDsN(8000)...)))
	b.Run("ids-8000", func(b *testing.B) { bench(b, body) })
}

// BenchmarkJSONValid is the standard library's validation alone, on the same
// 32 KB chat body, as a yardstick for BenchmarkParseChat/32KB.
func BenchmarkJSONValid(b *testing.B) {
	body := chatBody(words, 32<<10)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if !json.Valid(body) {
			b.Fatal("invalid")
		}
	}
}

// sseChunks returns a chat stream of n chunks as a model server sends it.
func sseChunks(n int) [][]byte {
	chunks := [][]byte{[]byte(chatRole)}
	for i := 1; i < n-2; i++ {
		chunks = append(chunks, fmt.Appendf(nil,
			"data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":%q},\"logprobs\":null,\"finish_reason\":null}]}\n\n",
			words[i%len(words)]))
	}
	return append(chunks, []byte(chatUsage), []byte(done))
}

func BenchmarkStreamScanner(b *testing.B) {
	benchScanner(b, sseChunks(200), func(s *StreamScanner) { s.Reset(true) }, func(ev Events, _ *StreamScanner) {
		if !ev.Has(FirstToken | UsageSeen | Done) {
			b.Fatalf("events %v", ev)
		}
	})
}

// benchScanner feeds chunks to a scanner reset by reset, as they arrive, in
// each round of b, and hands check the round's events and the scanner.
func benchScanner(b *testing.B, chunks [][]byte, reset func(*StreamScanner), check func(Events, *StreamScanner)) {
	total := 0
	for _, c := range chunks {
		total += len(c)
	}
	var s StreamScanner
	b.ReportAllocs()
	b.SetBytes(int64(total))
	for b.Loop() {
		reset(&s)
		var ev Events
		for _, c := range chunks {
			ev |= s.Feed(c)
		}
		check(ev, &s)
	}
}

// BenchmarkStreamScannerGRPC reads a streamed gRPC Generate response of
// 200 chunk messages and the complete one, as they arrive.
func BenchmarkStreamScannerGRPC(b *testing.B) {
	var chunks [][]byte
	for i := range 200 {
		chunks = append(chunks, genChunk([]uint64{uint64(1000 + i)}, 2000, 1, 1500)) // each counts its own token
	}
	chunks = append(chunks, genComplete([]uint64{1199}, "stop", 2000, 1, 1500)) // the last chunk's again
	benchScanner(b, chunks, func(s *StreamScanner) { s.ResetGRPC(GRPCGenerate) }, func(ev Events, s *StreamScanner) {
		if !ev.Has(FirstToken|UsageSeen) || ev.Has(Done) || s.Usage().CompletionTokens != 200 { // the trailers end a call
			b.Fatalf("events %v, usage %+v", ev, s.Usage())
		}
	})
}
