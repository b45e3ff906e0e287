package main

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func readEvents(t testing.TB, s string) ([]string, error) {
	t.Helper()
	er := newEventReader(strings.NewReader(s))
	var got []string
	for {
		data, err := er.next()
		if errors.Is(err, io.EOF) {
			return got, nil
		}
		if err != nil {
			return got, err
		}
		got = append(got, string(data))
	}
}

func TestEventReader(t *testing.T) {
	cases := map[string]struct {
		in   string
		want []string
	}{
		"openai stream": {
			in:   "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			want: []string{`{"a":1}`, "[DONE]"},
		},
		"no space after the colon": {in: "data:[DONE]\n\n", want: []string{"[DONE]"}},
		"comments, ids and event names are skipped": {
			in:   ": keep-alive\nid: 7\nevent: message\ndata: x\n\n",
			want: []string{"x"},
		},
		"CRLF line ends":          {in: "data: x\r\n\r\ndata: y\r\n", want: []string{"x", "y"}},
		"cut off without newline": {in: "data: x\n\ndata: [DO", want: []string{"x", "[DO"}},
		"empty":                   {in: "", want: nil},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := readEvents(t, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestEventReaderRejectsHugeLine(t *testing.T) {
	_, err := readEvents(t, "data: "+strings.Repeat("x", maxEventBytes+1)+"\n")
	if err == nil {
		t.Fatal("a line over the limit was read without error")
	}
}

func TestHasContent(t *testing.T) {
	cases := map[string]struct {
		data string
		want bool
	}{
		"chat delta with text":      {data: `{"choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"}}]}`, want: true},
		"chat role only":            {data: `{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`},
		"completion text":           {data: `{"choices":[{"index":0,"text":" the"}]}`, want: true},
		"usage chunk":               {data: `{"choices":[],"usage":{"prompt_tokens":3}}`},
		"second choice has text":    {data: `{"choices":[{"delta":{}},{"delta":{"content":"x"}}]}`, want: true},
		"done marker":               {data: `[DONE]`},
		"not json":                  {data: `{"choices":`},
		"choices of the wrong type": {data: `{"choices":{"delta":"x"}}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if got := hasContent([]byte(tc.data)); got != tc.want {
				t.Errorf("hasContent(%s) = %t, want %t", tc.data, got, tc.want)
			}
		})
	}
}

func FuzzEventReader(f *testing.F) {
	for _, s := range []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\ndata: [DONE]\n\n",
		": c\nid: 1\r\ndata:[DONE]\r\n",
		"data: {\"choices\":[{\"text\":\"\"}]}",
		"",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		events, err := readEvents(t, s)
		if err != nil {
			return
		}
		if len(events) > strings.Count(s, "data:") {
			t.Fatalf("%d events from %d data fields", len(events), strings.Count(s, "data:"))
		}
		for _, e := range events {
			if isDone([]byte(e)) && hasContent([]byte(e)) {
				t.Fatalf("%q is both [DONE] and content", e)
			}
		}
	})
}

func TestRequestID(t *testing.T) {
	cases := map[string]struct {
		uri    string
		want   int
		wantOK bool
	}{
		"tagged":             {uri: "/v1/chat/completions?request=17", want: 17, wantOK: true},
		"among other params": {uri: "/v1/chat/completions?a=b&request=3", want: 3, wantOK: true},
		"untagged":           {uri: "/v1/chat/completions"},
		"not a number":       {uri: "/v1/chat/completions?request=x"},
		"negative":           {uri: "/v1/chat/completions?request=-1"},
		"not a request URI":  {uri: "::"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, ok := requestID(tc.uri)
			if got != tc.want || ok != tc.wantOK {
				t.Errorf("requestID(%q) = %d, %t; want %d, %t", tc.uri, got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func FuzzRequestID(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions?request=1", "/x?request=", "?request=99999999999999999999", "%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, uri string) {
		if id, ok := requestID(uri); ok && id < 0 {
			t.Fatalf("requestID(%q) = %d, a negative ID", uri, id)
		}
		if id, ok := requestID(uri); !ok && id != 0 {
			t.Fatalf("requestID(%q) = %d without ok", uri, id)
		}
	})
}
