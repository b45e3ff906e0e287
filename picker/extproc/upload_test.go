package extproc

import (
	"mime/multipart"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
	"github.com/inferpick/inferpick/picker/rewrite"
)

// upload is a multipart/form-data transcription body with the fields in
// the order given ("file" is an audio file of n bytes), as the openai
// Python client (fields, then the file) or curl -F (any order) write it.
func upload(n int, fields ...string) (contentType, body string) {
	var b strings.Builder
	w := multipart.NewWriter(&b)
	_ = w.SetBoundary("------------------------d74496d66958873e") // as curl writes one
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == "file" {
			f, _ := w.CreateFormFile("file", "speech.wav")
			_, _ = f.Write([]byte(strings.Repeat("RIFF\r\n--", n/8+1)[:n]))
			continue
		}
		_ = w.WriteField(fields[i], fields[i+1])
	}
	_ = w.Close()
	return w.FormDataContentType(), b.String()
}

// sendUpload sends an upload to path in chunks of the gateway's size.
func sendUpload(e *env, path, contentType, body string, headers ...string) *session {
	s := e.open()
	s.requestHeaders(path, len(body), false, nil, append([]string{"content-type", contentType}, headers...)...)
	for len(body) > maxChunk {
		s.requestBody(body[:maxChunk], false)
		body = body[maxChunk:]
	}
	s.requestBody(body, true)
	return s
}

// A transcription goes to a pod that serves its model, whichever order
// the form's fields come in, or is answered 404 when none does; an
// upload that names no model is routed by load, unchanged.
func TestUploadsGoWhereTheirModelIsServed(t *testing.T) {
	e := newEnv(t, twoWorkers)
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.picker = pol
	e.worker("127.0.0.1:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"llama"}, Complete: true}, Scraped: time.Now()})
	e.worker("127.0.0.2:8000").SetMetrics(&registry.Metrics{Served: &registry.Served{Bases: []string{"whisper"}, Complete: true}, Scraped: time.Now()})

	for name, fields := range map[string][]string{
		"model first":                   {"model", "whisper", "file", "", "language", "en"},
		"model after the file":          {"file", "", "response_format", "json", "model", "whisper"},
		"translation, model last alone": {"file", "", "model", "whisper"},
	} {
		path := "/v1/audio/transcriptions"
		if strings.HasPrefix(name, "translation") {
			path = "/v1/audio/translations"
		}
		for range 4 {
			ct, body := upload(200<<10, fields...)
			r := sendUpload(e, path, ct, body).routed(true)
			if r.dest != "127.0.0.2:8000" {
				t.Fatalf("%s: a transcription for whisper went to %q, want the pod serving it", name, r.dest)
			}
			if string(r.body) != body {
				t.Fatalf("%s: the upload did not go upstream unchanged (%d bytes of %d)", name, len(r.body), len(body))
			}
		}
	}
	ct, body := upload(1000, "model", "whisper-nobody-serves", "file", "")
	if code, msg := sendUpload(e, "/v1/audio/transcriptions", ct, body).immediateReply(); code != 404 || !strings.Contains(msg, "whisper-nobody-serves") {
		t.Errorf("a transcription for a model no pod serves: %d %s, want 404 naming the model", code, msg)
	}
	ct, body = upload(1000, "file", "", "language", "en")
	if r := sendUpload(e, "/v1/audio/transcriptions", ct, body).routed(true); r.dest == "" || string(r.body) != body {
		t.Errorf("an upload without a model was not routed unchanged: dest %q", r.dest)
	}
	got := counters(t, e, "inference_objective_request_total")
	want := map[string]float64{
		"model_name=whisper,priority=0,target_model_name=whisper":     12,
		"model_name=__other__,priority=0,target_model_name=__other__": 0, // the 404's series
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("requests by model (-want +got):\n%s", diff)
	}
}

// A rewrite rule for an audio model changes the upload's model field, and
// the content-length with it; the file goes upstream as it came.
func TestUploadModelRewrite(t *testing.T) {
	cases := map[string]struct {
		target  string
		fields  []string
		headers []string
	}{
		"model first":             {target: "food-review-v2", fields: []string{"model", "food-review", "file", ""}},
		"model after a long file": {target: "food-review-v2", fields: []string{"file", "", "model", "food-review", "stream", "true"}},
		"a shorter name":          {target: "v3", fields: []string{"model", "food-review", "file", ""}},
		"the rewrite header":      {target: `a "quoted" name`, fields: []string{"model", "other", "file", ""}, headers: []string{ModelRewriteHeader, `a "quoted" name`}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			e, picked := rewriteEnv(t, canaryTable(rewrite.Target{Model: tc.target}))
			ct, body := upload(150<<10, tc.fields...)
			got := sendUpload(e, "/v1/audio/transcriptions", ct, body, tc.headers...).routed(true)

			var want []string
			for i := 0; i+1 < len(tc.fields); i += 2 {
				if tc.fields[i] == "model" {
					want = append(want, tc.fields[i], tc.target)
				} else {
					want = append(want, tc.fields[i], tc.fields[i+1])
				}
			}
			_, wantBody := upload(150<<10, want...)
			if got := string(got.body); got != wantBody {
				t.Fatalf("the upload went upstream as\n%.300q\nwant\n%.300q", got, wantBody)
			}
			if n, err := strconv.Atoi(got.set["content-length"]); err != nil || n != len(got.body) {
				t.Errorf("content-length = %q, the body has %d bytes", got.set["content-length"], len(got.body))
			}
			if diff := cmp.Diff([]string{tc.target}, picked()); diff != "" {
				t.Errorf("models the policy picked for (-want +got):\n%s", diff)
			}
		})
	}
}

// A streamed transcription (stream=true) comes back as vLLM's
// transcription.chunk events: the first text moves the request to decode,
// [DONE] ends it, and its usage counts under the upload's model.
func TestStreamedTranscription(t *testing.T) {
	e := newEnv(t, []string{"127.0.0.1:8000"})
	w := e.worker("127.0.0.1:8000")
	ct, body := upload(1000, "file", "", "model", "whisper", "stream", "true")
	s := sendUpload(e, "/v1/audio/transcriptions", ct, body)
	s.routed(true)
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	if p, d := totalLoad(w); p != 1 || d != 0 {
		t.Fatalf("before any text: prefill %d, decode %d; want 1, 0", p, d)
	}
	chunk := `data: {"id":"trsc-1","object":"transcription.chunk","created":1,"model":"whisper","choices":[{"delta":{"content":" Hello"}}]}` + "\n\n"
	s.responseBody(chunk, false)
	s.recv()
	if p, d := totalLoad(w); p != 0 || d != 1 {
		t.Fatalf("after the first text: prefill %d, decode %d; want 0, 1", p, d)
	}
	usage := `data: {"id":"trsc-1","object":"transcription.chunk","created":1,"model":"whisper","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}` + "\n\n"
	s.responseBody(usage+sseDone, true)
	s.recv()
	if p, d := totalLoad(w); p != 0 || d != 0 {
		t.Fatalf("after [DONE]: prefill %d, decode %d; want 0, 0", p, d)
	}
	mfs, err := e.metrics.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "inference_objective_output_tokens" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "model_name" {
					got[l.GetValue()] += m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	if diff := cmp.Diff(map[string]float64{"whisper": 3}, got); diff != "" {
		t.Errorf("output tokens by model (-want +got):\n%s", diff)
	}
}

// An upload larger than the body limit is routed on the front of its body
// when its model field comes before the file (as the openai Python client
// writes it), holding no more of it than that front; one whose model comes
// after the file is answered 413, naming the order.
func TestLargeUploads(t *testing.T) {
	const limit = 256 << 10
	e := newEnv(t, []string{"127.0.0.1:8000"}, func(o *Options) { o.MaxBodyBytes = limit })

	ct, body := upload(1<<20, "model", "whisper", "file", "", "language", "en")
	s := sendUpload(e, "/v1/audio/transcriptions", ct, body)
	r := s.routed(true)
	if string(r.body) != body {
		t.Fatalf("the upload did not go upstream whole: %d bytes of %d", len(r.body), len(body))
	}
	if r.set["content-length"] != strconv.Itoa(len(body)) {
		t.Errorf("content-length %q, want %d", r.set["content-length"], len(body))
	}
	if used := e.server.budget.Used(); used > limit {
		t.Errorf("the picker holds %d bytes of the upload, over the body limit", used)
	}
	s.responseHeaders(200, "application/json", false, "")
	s.recv()
	s.responseBody(`{"text":"hello"}`, true)
	s.recv()
	if got := counters(t, e, "inference_objective_request_total"); got["model_name=whisper,priority=0,target_model_name=whisper"] != 1 {
		t.Errorf("the upload is not counted under its model: %v", got)
	}

	// Sent without a content-length (chunked): none is set.
	ct, body = upload(1<<20, "model", "whisper", "file", "")
	s = e.open()
	s.requestHeaders("/v1/audio/transcriptions", -1, false, nil, "content-type", ct)
	for rest := body; rest != ""; {
		n := min(len(rest), maxChunk)
		s.requestBody(rest[:n], n == len(rest))
		rest = rest[n:]
	}
	if r := s.routed(true); string(r.body) != body || r.set["content-length"] != "" {
		t.Errorf("a chunked upload: %d bytes of %d upstream, content-length %q, want none", len(r.body), len(body), r.set["content-length"])
	}

	ct, body = upload(1<<20, "file", "", "model", "whisper")
	s = e.open()
	s.requestHeaders("/v1/audio/transcriptions", len(body), false, nil, "content-type", ct)
	for i := 0; i <= limit/maxChunk; i++ { // the chunk that passes the limit is the last one read
		s.requestBody(body[i*maxChunk:(i+1)*maxChunk], false)
	}
	code, msg := s.immediateReply()
	if code != 413 || !strings.Contains(msg, "model field comes before its file") {
		t.Errorf("an upload over the limit with its model after the file: %d %s, want 413 naming the order", code, msg)
	}
}

// Every request's content-type is read for an upload's boundary: a JSON
// request's costs no allocation.
func TestReadingAJSONContentTypeDoesNotAllocate(t *testing.T) {
	for _, ct := range []string{"application/json; charset=utf-8", "application/json; charset=utf-8; profile=chat-completions"} {
		hv := &corev3.HeaderValue{Key: "content-type", RawValue: []byte(ct)}
		var b string
		if got := testing.AllocsPerRun(100, func() { b = formBoundary(hv) }); got != 0 || b != "" {
			t.Fatalf("formBoundary(%s): %v allocations (boundary %q), want 0", ct, got, b)
		}
	}
}
