package openai

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// parsed is what a test compares after Parse: the Request with its prompt
// joined segment by segment into strings.
type parsed struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	CacheSalt    string
	Media        bool
	Prompt       []string
}

func summarize(r *Request) parsed {
	p := parsed{Model: r.Model, Stream: r.Stream, IncludeUsage: r.IncludeUsage, CacheSalt: string(r.CacheSalt), Media: r.Media}
	for _, s := range r.Prompt {
		p.Prompt = append(p.Prompt, string(s))
	}
	return p
}

func TestParse(t *testing.T) {
	tests := map[string]struct {
		kind Kind
		body string
		want parsed
	}{
		"chat with string contents": {
			kind: ChatCompletions,
			body: `{"model":"llama","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi\nthere"}]}`,
			want: parsed{Model: "llama", Prompt: []string{"<|system|>\n", "Be brief.", "<|user|>\n", `Hi\nthere`}},
		},
		"chat content before role": {
			kind: ChatCompletions,
			body: `{"messages":[{"content":"hello","role":"user"},{"content":"hey","role":"assistant"}],"model":"m"}`,
			want: parsed{Model: "m", Prompt: []string{"<|user|>\n", "hello", "<|assistant|>\n", "hey"}},
		},
		"chat stream options and salt": {
			kind: ChatCompletions,
			body: `{"model":"m","stream":true,"stream_options":{"include_usage":true,"x":[1]},"cache_salt":"tenant-a","messages":[]}`,
			want: parsed{Model: "m", Stream: true, IncludeUsage: true, CacheSalt: "tenant-a"},
		},
		"numbers beyond float64's range": {
			kind: ChatCompletions,
			body: `{"model":"m","temperature":1e400,"seed":-123456789012345678901234567890,"messages":[]}`,
			want: parsed{Model: "m"},
		},
		"stream and include_usage as pydantic reads them": {
			kind: ChatCompletions,
			body: `{"model":"m","stream":1,"stream_options":{"include_usage":"True"},"messages":[]}`,
			want: parsed{Model: "m", Stream: true, IncludeUsage: true},
		},
		"stream as a number or a string that is false": {
			kind: ChatCompletions,
			body: `{"model":"m","stream":true,"stream":0.0,"stream_options":{"include_usage":true,"include_usage":"off"},"messages":[]}`,
			want: parsed{Model: "m"},
		},
		"stream as an escaped string": {
			kind: Completions,
			body: `{"model":"m","stream":"y\u0065s","prompt":"x"}`,
			want: parsed{Model: "m", Stream: true, Prompt: []string{"x"}},
		},
		"byte order mark": {
			kind: ChatCompletions,
			body: "\xef\xbb\xbf" + `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`,
			want: parsed{Model: "m", Stream: true, Prompt: []string{"<|user|>\n", "hi"}},
		},
		"chat null optionals": {
			kind: ChatCompletions,
			body: `{"model":"m","stream":null,"stream_options":null,"cache_salt":null,"tools":null,"messages":[{"role":"assistant","content":null}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|assistant|>\n"}},
		},
		"chat content parts": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":"https://x/a.png"}},{"text":"at this","type":"text"}]}]}`,
			want: parsed{Model: "m", Media: true, Prompt: []string{"<|user|>\n", "look", `{"type":"image_url","image_url":{"url":"https://x/a.png"}}`, "at this"}},
		},
		"chat refusal part: no media": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|assistant|>\n", `{"type":"refusal","refusal":"no"}`}},
		},
		"chat untyped part without text: media": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":[{"image_url":{"url":"https://x/a.png"}}]}]}`,
			want: parsed{Model: "m", Media: true, Prompt: []string{"<|user|>\n", `{"image_url":{"url":"https://x/a.png"}}`}},
		},
		"chat content parts as strings": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":["look",{"type":"image_url","image_url":{"url":"https://x/a.png"}},"at this"]}]}`,
			want: parsed{Model: "m", Media: true, Prompt: []string{"<|user|>\n", "look", `{"type":"image_url","image_url":{"url":"https://x/a.png"}}`, "at this"}},
		},
		"chat tools go first": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"w"}}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|tools|>\n", `[{"type":"function","function":{"name":"w"}}]`, "<|user|>\n", "weather?"}},
		},
		"chat tool calls after content": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"w","arguments":"{}"}}],"content":"calling"},{"role":"tool","tool_call_id":"1","content":"sunny"}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|assistant|>\n", "calling", "<|tool_calls|>\n", `[{"id":"1","function":{"name":"w","arguments":"{}"}}]`, "<|tool|>\n", "sunny"}},
		},
		"chat empty tool calls and content": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[]}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|assistant|>\n"}},
		},
		"chat unknown and missing roles": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"critic","content":"meh"},{"content":"who"}]}`,
			want: parsed{Model: "m", Prompt: []string{`"critic"`, "meh", "<|message|>\n", "who"}},
		},
		"chat developer role and whitespace": {
			kind: ChatCompletions,
			body: "{ \"model\" : \"m\" ,\n \"messages\" : [ { \"role\" : \"developer\" , \"content\" : \"rules\" } ] }\n",
			want: parsed{Model: "m", Prompt: []string{"<|developer|>\n", "rules"}},
		},
		"chat escapes and unicode kept raw": {
			kind: ChatCompletions,
			body: `{"model":"m","messages":[{"role":"user","content":"caf\u00e9 \"quoted\" 日本語"}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|user|>\n", `caf\u00e9 \"quoted\" 日本語`}},
		},
		"escaped quotes at string edges": {
			kind: Completions,
			body: `{"model":"m","prompt":"\"a long string that ends in an escaped quote\\\""}`,
			want: parsed{Model: "m", Prompt: []string{`\"a long string that ends in an escaped quote\\\"`}},
		},
		"escaped model is decoded": {
			kind: ChatCompletions,
			body: `{"model":"org\/llama-\u0033","messages":[]}`,
			want: parsed{Model: "org/llama-3"},
		},
		"last model wins": {
			kind: Unknown,
			body: `{"model":"a","model":"b"}`,
			want: parsed{Model: "b"},
		},
		"last messages win": {
			kind: ChatCompletions,
			body: `{"model":"m","tools":[1],"messages":[{"role":"user","content":"dropped"}],"tools":[2],"messages":[{"role":"user","content":"kept"}]}`,
			want: parsed{Model: "m", Prompt: []string{"<|tools|>\n", "[2]", "<|user|>\n", "kept"}},
		},
		"last prompt wins": {
			kind: Completions,
			body: `{"model":"m","prompt":["dropped","too"],"prompt":"kept"}`,
			want: parsed{Model: "m", Prompt: []string{"kept"}},
		},
		"last embeddings input wins": {
			kind: Embeddings,
			body: `{"model":"m","input":"dropped","input":"kept"}`,
			want: parsed{Model: "m", Prompt: []string{"kept"}},
		},
		"last responses input wins": {
			kind: Responses,
			body: `{"model":"m","input":"dropped","instructions":"i","input":"kept"}`,
			want: parsed{Model: "m", Prompt: []string{"<|system|>\n", "i", "<|user|>\n", "kept"}},
		},
		"member names written with escapes": {
			kind: ChatCompletions,
			body: `{"m\u006fdel":"m","stre\u0061m":true,"messages":[{"r\u006fle":"user","c\u006fntent":"hi"}]}`,
			want: parsed{Model: "m", Stream: true, Prompt: []string{"<|user|>\n", "hi"}},
		},
		"completions string": {
			kind: Completions,
			body: `{"model":"m","prompt":"Once upon a time","max_tokens":16,"stream":false}`,
			want: parsed{Model: "m", Prompt: []string{"Once upon a time"}},
		},
		"completions array of strings": {
			kind: Completions,
			body: `{"model":"m","prompt":["Once ","upon"]}`,
			want: parsed{Model: "m", Prompt: []string{"Once ", "upon"}},
		},
		"completions tokens": {
			kind: Completions,
			body: `{"model":"m","prompt":[ 1, 2,3 ]}`,
			want: parsed{Model: "m", Prompt: []string{"1, 2,3"}},
		},
		"completions token batches": {
			kind: Completions,
			body: `{"model":"m","prompt":[[1,2],[3]]}`,
			want: parsed{Model: "m", Prompt: []string{"1,2", "3"}},
		},
		"completions empty array": {
			kind: Completions,
			body: `{"model":"m","prompt":[]}`,
			want: parsed{Model: "m"},
		},
		"completions messages ignored": {
			kind: Completions,
			body: `{"model":"m","messages":{"not":"read"},"prompt":"p"}`,
			want: parsed{Model: "m", Prompt: []string{"p"}},
		},
		"responses string input with instructions after": {
			kind: Responses,
			body: `{"model":"m","input":"tell me","instructions":"You are terse."}`,
			want: parsed{Model: "m", Prompt: []string{"<|system|>\n", "You are terse.", "<|user|>\n", "tell me"}},
		},
		"responses items": {
			kind: Responses,
			body: `{"model":"m","tools":[{"type":"function","name":"f"}],"input":[` +
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"go"},{"type":"input_image","image_url":"data:x"}]},` +
				`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},` +
				`{"type":"function_call_output","call_id":"c","output":"ok"},` +
				`{"role":"assistant","content":[{"type":"output_text","text":"done","annotations":[]}]}]}`,
			want: parsed{Model: "m", Media: true, Prompt: []string{
				"<|tools|>\n", `[{"type":"function","name":"f"}]`,
				"<|user|>\n", "go", `{"type":"input_image","image_url":"data:x"}`,
				`{"type":"function_call","call_id":"c","name":"f","arguments":"{}"}`,
				`{"type":"function_call_output","call_id":"c","output":"ok"}`,
				"<|assistant|>\n", "done",
			}},
		},
		"embeddings string": {
			kind: Embeddings,
			body: `{"input":"embed me","model":"e5"}`,
			want: parsed{Model: "e5", Prompt: []string{"embed me"}},
		},
		"embeddings array": {
			kind: Embeddings,
			body: `{"input":["a","b"],"model":"e5","encoding_format":"float"}`,
			want: parsed{Model: "e5", Prompt: []string{"a", "b"}},
		},
		"unknown kind reads model and stream only": {
			kind: Unknown,
			body: `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"prompt":"y"}`,
			want: parsed{Model: "m", Stream: true},
		},
		"unknown fields of every type skipped": {
			kind: ChatCompletions,
			body: `{"a":{"b":[1,-2.5e+3,true,false,null,{"c":"\ud83d\ude00"}]},"model":"m","temperature":0.7,"messages":[]}`,
			want: parsed{Model: "m"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := Parse(tc.kind, []byte(tc.body), &r); err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if r.Kind != tc.kind {
				t.Errorf("Kind = %v, want %v", r.Kind, tc.kind)
			}
			if diff := cmp.Diff(tc.want, summarize(&r)); diff != "" {
				t.Errorf("Parse (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := map[string]struct {
		kind Kind
		body string
		want error
	}{
		"empty body":                 {body: ``, want: ErrSyntax},
		"blank body":                 {body: " \n", want: ErrSyntax},
		"not JSON":                   {body: `model=m`, want: ErrSyntax},
		"array":                      {body: `[{"model":"m"}]`, want: ErrNotObject},
		"string":                     {body: `"m"`, want: ErrNotObject},
		"number":                     {body: `12`, want: ErrNotObject},
		"invalid non-object":         {body: `[1,]`, want: ErrSyntax},
		"unterminated object":        {body: `{"model":"m"`, want: ErrSyntax},
		"unterminated string":        {body: `{"model":"m`, want: ErrSyntax},
		"trailing comma":             {body: `{"model":"m",}`, want: ErrSyntax},
		"missing colon":              {body: `{"model" "m"}`, want: ErrSyntax},
		"unquoted key":               {body: `{model:"m"}`, want: ErrSyntax},
		"trailing data":              {body: `{"model":"m"}{}`, want: ErrSyntax},
		"single quotes":              {body: `{'model':'m'}`, want: ErrSyntax},
		"bad escape":                 {body: `{"model":"m","x":"\q"}`, want: ErrSyntax},
		"short unicode escape":       {body: `{"model":"m","x":"\u12"}`, want: ErrSyntax},
		"control char in string":     {body: "{\"model\":\"m\",\"x\":\"a\tb\"}", want: ErrSyntax},
		"invalid UTF-8":              {body: "{\"model\":\"m\",\"x\":\"\xff\xfe\"}", want: ErrSyntax},
		"invalid UTF-8 in long str":  {body: "{\"model\":\"m\",\"x\":\"aaaaaaaaaaaaaaaa\xc3aaaaaaaaaaaaaaaaa\"}", want: ErrSyntax},
		"control char after escape":  {body: "{\"model\":\"m\",\"x\":\"aaaaaaaaaa\\naaaaaaaaaaaaaaa\x01aaaa\"}", want: ErrSyntax},
		"invalid UTF-8 after escape": {body: "{\"model\":\"m\",\"x\":\"aaaaaaaa\\tbbbbbbbbbb\xe2\x82bbbbbbbbb\"}", want: ErrSyntax},
		"surrogate encoded in UTF-8": {body: "{\"model\":\"m\",\"x\":\"\xed\xa0\x80\"}", want: ErrSyntax},
		"escaped closing quote":      {body: `{"model":"m","x":"abc\"}`, want: ErrSyntax},
		"leading zero":               {body: `{"model":"m","x":01}`, want: ErrSyntax},
		"bare minus":                 {body: `{"model":"m","x":-}`, want: ErrSyntax},
		"dot without digits":         {body: `{"model":"m","x":1.}`, want: ErrSyntax},
		"exponent without digits":    {body: `{"model":"m","x":1e+}`, want: ErrSyntax},
		"NaN":                        {body: `{"model":"m","x":NaN}`, want: ErrSyntax},
		"bad literal":                {body: `{"model":"m","x":tru}`, want: ErrSyntax},
		"invalid JSON after prompt":  {kind: ChatCompletions, body: `{"model":"m","messages":[],"x":[}`, want: ErrSyntax},
		"too deep":                   {body: `{"model":"m","x":` + nest(MaxDepth) + `}`, want: ErrTooDeep},
		"missing model":              {kind: ChatCompletions, body: `{"messages":[]}`, want: ErrMissingModel},
		"empty model":                {body: `{"model":""}`, want: ErrMissingModel},
		"null model":                 {body: `{"model":null}`, want: ErrMissingModel},
		"model number":               {body: `{"model":7}`, want: ErrFieldType},
		"model object":               {body: `{"model":{"name":"m"}}`, want: ErrFieldType},
		"stream string":              {body: `{"model":"m","stream":"maybe"}`, want: ErrFieldType},
		"stream number":              {body: `{"model":"m","stream":2}`, want: ErrFieldType},
		"stream huge number":         {body: `{"model":"m","stream":1e400}`, want: ErrFieldType},
		"stream array":               {body: `{"model":"m","stream":[true]}`, want: ErrFieldType},
		"stream bad number":          {body: `{"model":"m","stream":1.}`, want: ErrSyntax},
		"stream bad string":          {body: "{\"model\":\"m\",\"stream\":\"tr\xffe\"}", want: ErrSyntax},
		"byte order mark twice":      {body: "\xef\xbb\xbf\xef\xbb\xbf{\"model\":\"m\"}", want: ErrSyntax},
		"byte order mark not first":  {body: " \xef\xbb\xbf{\"model\":\"m\"}", want: ErrSyntax},
		"byte order mark, array":     {body: "\xef\xbb\xbf[]", want: ErrNotObject},
		"stream_options array":       {body: `{"model":"m","stream_options":[]}`, want: ErrFieldType},
		"include_usage number":       {body: `{"model":"m","stream_options":{"include_usage":-1}}`, want: ErrFieldType},
		"cache_salt number":          {body: `{"model":"m","cache_salt":1}`, want: ErrFieldType},
		"messages object":            {kind: ChatCompletions, body: `{"model":"m","messages":{}}`, want: ErrFieldType},
		"messages null":              {kind: ChatCompletions, body: `{"model":"m","messages":null}`, want: ErrFieldType},
		"message string":             {kind: ChatCompletions, body: `{"model":"m","messages":["hi"]}`, want: ErrFieldType},
		"role number":                {kind: ChatCompletions, body: `{"model":"m","messages":[{"role":1}]}`, want: ErrFieldType},
		"content number":             {kind: ChatCompletions, body: `{"model":"m","messages":[{"role":"user","content":1}]}`, want: ErrFieldType},
		"content part number":        {kind: ChatCompletions, body: `{"model":"m","messages":[{"role":"user","content":[1]}]}`, want: ErrFieldType},
		"tools object":               {kind: ChatCompletions, body: `{"model":"m","tools":{}}`, want: ErrFieldType},
		"prompt number":              {kind: Completions, body: `{"model":"m","prompt":1}`, want: ErrFieldType},
		"prompt array of objects":    {kind: Completions, body: `{"model":"m","prompt":[{}]}`, want: ErrFieldType},
		"embeddings input null":      {kind: Embeddings, body: `{"model":"m","input":null}`, want: ErrFieldType},
		"responses input number":     {kind: Responses, body: `{"model":"m","input":1}`, want: ErrFieldType},
		"responses instructions":     {kind: Responses, body: `{"model":"m","instructions":["a"]}`, want: ErrFieldType},
		"responses item string":      {kind: Responses, body: `{"model":"m","input":["a"]}`, want: ErrFieldType},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r Request
			err := Parse(tc.kind, []byte(tc.body), &r)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Parse(%q) error = %v, want %v", tc.body, err, tc.want)
			}
		})
	}
}

// nest returns n nested arrays.
func nest(n int) string {
	b := make([]byte, 0, 2*n)
	for range n {
		b = append(b, '[')
	}
	for range n {
		b = append(b, ']')
	}
	return string(b)
}

func TestParseDepthLimitIsInclusive(t *testing.T) {
	// The top-level object is one level, so MaxDepth-1 arrays inside fit.
	body := `{"model":"m","x":` + nest(MaxDepth-1) + `}`
	var r Request
	if err := Parse(Unknown, []byte(body), &r); err != nil {
		t.Fatalf("Parse at the depth limit: %v", err)
	}
}

// vLLM reads a bare string in a content array as a text part: the prompt,
// and so the prefix the policy looks up, must be the same either way.
func TestStringContentPartsReadAsTextParts(t *testing.T) {
	parts := `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"Hello, "},{"type":"text","text":"world"}]}]}`
	strs := `{"model":"m","messages":[{"role":"user","content":["Hello, ","world"]}]}`
	var a, b Request
	if err := Parse(ChatCompletions, []byte(parts), &a); err != nil {
		t.Fatal(err)
	}
	if err := Parse(ChatCompletions, []byte(strs), &b); err != nil {
		t.Fatalf("Parse(%s): %v", strs, err)
	}
	if diff := cmp.Diff(summarize(&a), summarize(&b)); diff != "" {
		t.Errorf("string parts read unlike text parts (-text parts +strings):\n%s", diff)
	}
}

func TestRequestReuse(t *testing.T) {
	var r Request
	first := `{"model":"m","messages":[{"role":"user","content":"one"},{"role":"user","content":"two"}],"stream":true,"cache_salt":"s"}`
	if err := Parse(ChatCompletions, []byte(first), &r); err != nil {
		t.Fatal(err)
	}
	model := r.Model
	second := `{"model":"m","prompt":"three"}`
	if err := Parse(Completions, []byte(second), &r); err != nil {
		t.Fatal(err)
	}
	want := parsed{Model: "m", Prompt: []string{"three"}}
	if diff := cmp.Diff(want, summarize(&r)); diff != "" {
		t.Errorf("second Parse (-want +got):\n%s", diff)
	}
	if r.Kind != Completions {
		t.Errorf("Kind = %v, want %v", r.Kind, Completions)
	}
	body := []byte(first)
	if allocs := testing.AllocsPerRun(10, func() {
		_ = Parse(ChatCompletions, body, &r)
	}); allocs != 0 {
		t.Errorf("Parse of a warm Request allocated %v times, want 0", allocs)
	}
	if r.Model != model {
		t.Errorf("Model = %q, want %q", r.Model, model)
	}
}

// appendPrompt appends r's prompt segments, joined, to dst.
func appendPrompt(r *Request, dst []byte) []byte {
	for _, s := range r.Prompt {
		dst = append(dst, s...)
	}
	return dst
}

func TestPromptHelpers(t *testing.T) {
	var r Request
	if err := Parse(ChatCompletions, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`), &r); err != nil {
		t.Fatal(err)
	}
	joined := string(appendPrompt(&r, nil))
	if want := "<|user|>\nhi"; joined != want {
		t.Errorf("joined prompt = %q, want %q", joined, want)
	}
	if r.PromptLen() != len(joined) {
		t.Errorf("PromptLen = %d, want %d", r.PromptLen(), len(joined))
	}
}

func TestModelSpan(t *testing.T) {
	cases := map[string]struct {
		body string
		want string // the raw text of the span
	}{
		"plain":            {`{"model":"m1","prompt":"x"}`, `m1`},
		"spaces":           {`{ "prompt":"x" , "model" :  "llama-3" }`, `llama-3`},
		"escaped":          {`{"model":"a\u00e9\"b","prompt":"x"}`, `a\u00e9\"b`},
		"last of repeated": {`{"model":"first","prompt":"x","model":"second"}`, `second`},
		"long":             {`{"model":"` + strings.Repeat("m", 40) + `","prompt":"x"}`, strings.Repeat("m", 40)},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := Parse(Completions, []byte(tc.body), &r); err != nil {
				t.Fatal(err)
			}
			if got := tc.body[r.ModelStart:r.ModelEnd]; got != tc.want {
				t.Errorf("model span = %q, want %q", got, tc.want)
			}
			checkModelSpan(t, []byte(tc.body), &r)
		})
	}
}

func TestInputAndTools(t *testing.T) {
	cases := map[string]struct {
		kind        Kind
		body        string
		input, tool string
	}{
		"chat":               {ChatCompletions, `{"model":"m","messages": [{"role":"user","content":"hi"}] ,"tools":[{"type":"function"}]}`, `[{"role":"user","content":"hi"}]`, `[{"type":"function"}]`},
		"chat without tools": {ChatCompletions, `{"messages":[],"model":"m"}`, `[]`, ``},
		"completion string":  {Completions, `{"model":"m","prompt":"a\nb"}`, `"a\nb"`, ``},
		"completion array":   {Completions, `{"model":"m","prompt":["a","b"]}`, `["a","b"]`, ``},
		"responses":          {Responses, `{"model":"m","input":"x","tools":[]}`, ``, ``},
		"unknown":            {Unknown, `{"model":"m","messages":[]}`, ``, ``},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := Parse(tc.kind, []byte(tc.body), &r); err != nil {
				t.Fatal(err)
			}
			if string(r.Input) != tc.input || string(r.Tools) != tc.tool {
				t.Errorf("input %q, tools %q; want %q, %q", r.Input, r.Tools, tc.input, tc.tool)
			}
			r.Reset()
			if r.Input != nil || r.Tools != nil {
				t.Errorf("Reset kept input %q, tools %q", r.Input, r.Tools)
			}
		})
	}
}

// A chat's parts an encode pod takes apart are those llm-d's decider and
// sidecar both act on: an image_url or an input_audio part; a file, a
// video_url, an audio_url or a refusal part is none.
func TestParseEncodable(t *testing.T) {
	chat := func(parts string) string {
		return `{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"t"},` + parts + `]}]}`
	}
	tests := map[string]struct {
		body             string
		media, encodable bool
	}{
		"text":        {body: chat(`{"type":"text","text":"u"}`)},
		"image_url":   {body: chat(`{"type":"image_url","image_url":{"url":"http://x/a.png"}}`), media: true, encodable: true},
		"input_audio": {body: chat(`{"type":"input_audio","input_audio":{"data":"AAA=","format":"wav"}}`), media: true, encodable: true},
		"file":        {body: chat(`{"type":"file","file":{"file_id":"f"}}`), media: true},
		"video_url":   {body: chat(`{"type":"video_url","video_url":{"url":"http://x/a.mp4"}}`), media: true},
		"audio_url":   {body: chat(`{"type":"audio_url","audio_url":{"url":"http://x/a.wav"}}`), media: true},
		"refusal":     {body: chat(`{"type":"refusal","refusal":"no"}`)},
		"untyped":     {body: chat(`{"image_url":{"url":"http://x/a.png"}}`), media: true},
		"escaped":     {body: chat(`{"type":"image\u005furl","image_url":{"url":"http://x/a.png"}}`), media: true, encodable: true},
		"file then image": {
			body:  chat(`{"type":"file","file":{}},{"type":"image_url","image_url":{"url":"http://x/a.png"}}`),
			media: true, encodable: true,
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			var r Request
			if err := Parse(ChatCompletions, []byte(tc.body), &r); err != nil {
				t.Fatal(err)
			}
			if r.Media != tc.media || r.Encodable != tc.encodable {
				t.Errorf("media %v encodable %v, want %v and %v", r.Media, r.Encodable, tc.media, tc.encodable)
			}
			r.Reset()
			if err := Parse(ChatCompletions, []byte(chat(`{"type":"text","text":"u"}`)), &r); err != nil || r.Encodable {
				t.Errorf("the next text chat: encodable %v, %v; want none", r.Encodable, err)
			}
		})
	}
}
