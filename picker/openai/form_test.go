package openai

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// crlf writes a body's lines with CRLF line breaks.
func crlf(lines ...string) string { return strings.Join(lines, "\r\n") }

func TestFormModel(t *testing.T) {
	audio := strings.Repeat("RIFF\x00\x01\r\n-", 1000)
	cases := map[string]struct {
		contentType string
		body        string
		want        string
		found       bool
	}{
		"openai python client: fields then the file": {
			contentType: "multipart/form-data; boundary=b1",
			body: crlf("--b1", `Content-Disposition: form-data; name="model"`, "", "whisper-large-v3",
				"--b1", `Content-Disposition: form-data; name="file"; filename="a.wav"`, "Content-Type: audio/wav", "", audio,
				"--b1--", ""),
			want: "whisper-large-v3", found: true,
		},
		"curl -F: the file first, the model last": {
			contentType: "multipart/form-data; boundary=------------------------abc",
			body: crlf("--------------------------abc", `Content-Disposition: form-data; name="file"; filename="a.wav"`, "Content-Type: audio/wav", "", audio,
				"--------------------------abc", `Content-Disposition: form-data; name="language"`, "", "en",
				"--------------------------abc", `Content-Disposition: form-data; name="model"`, "", "whisper",
				"--------------------------abc--", ""),
			want: "whisper", found: true,
		},
		"unquoted name and other parameters": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data ; foo="x y"; name=model ;`, "", "m", "--b--"),
			want:        "m", found: true,
		},
		"header names in any case, blanks around the value": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", "content-type: text/plain", "CONTENT-DISPOSITION:\tFORM-DATA; NAME=\"model\"  ", "", "m", "--b--"),
			want:        "m", found: true,
		},
		"LF line breaks": {
			contentType: "multipart/form-data; boundary=b",
			body:        "--b\nContent-Disposition: form-data; name=\"model\"\n\nm\r\n--b--\n",
			want:        "m\r", found: true, // as Go's reader: LF alone ends the value
		},
		"a preamble and an epilogue": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("this is a preamble", "--b not a boundary", "--b", `Content-Disposition: form-data; name="model"`, "", "m", "--b--", "epilogue"),
			want:        "m", found: true,
		},
		"a quoted boundary in the content type": {
			contentType: `Multipart/Form-Data; charset=utf-8; boundary="a b:c"`,
			body:        crlf("--a b:c", `Content-Disposition: form-data; name="model"`, "", "m", "--a b:c--", ""),
			want:        "m", found: true,
		},
		"a line that starts like the boundary is part of the value": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "", "m", "--bb", "--b--"),
			want:        "m\r\n--bb", found: true,
		},
		"the last model field counts, as the server's form parser keeps it": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "", "first", "--b", `Content-Disposition: form-data; name="model"`, "", "second", "--b--"),
			want:        "second", found: true,
		},
		"an empty model": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "", "", "--b--"),
			want:        "", found: true,
		},
		"a folded header line is read as Go reads it": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data;`, ` name="model"`, "", "m", "--b--"),
			want:        "m", found: true,
		},
		"an RFC 2231 name": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name*=utf-8''mod%65l`, "", "m", "--b--"),
			want:        "m", found: true,
		},
		"no model field": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="file"; filename="model"`, "", "x", "--b--"),
		},
		"a name that only starts with model": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="models"`, "", "x", "--b--"),
		},
		"a quoted-printable model": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "Content-Transfer-Encoding: quoted-printable", "", "=6D", "--b--"),
		},
		"an 8bit model is read": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "Content-Transfer-Encoding: 8bit", "", "m", "--b--"),
			want:        "m", found: true,
		},
		"duplicate parameters make no disposition": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"; NAME="x"`, "", "m", "--b--"),
		},
		"cut short in the file after the model, the form ends there as Go's reader ends it": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "", "m", "--b", `Content-Disposition: form-data; name="file"`, "", "truncat"),
			want:        "m", found: true,
		},
		"cut short in the model field": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition: form-data; name="file"`, "", "x", "--b", `Content-Disposition: form-data; name="model"`, "", "whisp"),
		},
		"a malformed header": {
			contentType: "multipart/form-data; boundary=b",
			body:        crlf("--b", `Content-Disposition form-data; name="model"`, "", "m", "--b--"),
		},
		"not a form": {
			contentType: "application/json",
			body:        `{"model":"m"}`,
		},
		"a form without a boundary": {
			contentType: "multipart/form-data",
			body:        crlf("--b", `Content-Disposition: form-data; name="model"`, "", "m", "--b--"),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, found := "", false
			if boundary, ok := FormBoundary(tc.contentType); ok {
				start, end, ok := FormModel([]byte(tc.body), boundary)
				if ok {
					got, found = tc.body[start:end], true
				}
			}
			if diff := cmp.Diff(struct {
				Model string
				Found bool
			}{tc.want, tc.found}, struct {
				Model string
				Found bool
			}{got, found}); diff != "" {
				t.Errorf("model (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFormModelPrefix reads the front of uploads still arriving.
func TestFormModelPrefix(t *testing.T) {
	modelPart := crlf("--b", `Content-Disposition: form-data; name="model"`, "", "whisper")
	filePart := crlf("--b", `Content-Disposition: form-data; name="file"; filename="a.wav"`, "", "RIFF")
	cases := map[string]struct {
		front string
		want  string
		found bool
	}{
		"the model, then the file arriving": {front: modelPart + "\r\n" + filePart, want: "whisper", found: true},
		"the first model field":             {front: modelPart + "\r\n" + crlf("--b", `Content-Disposition: form-data; name="model"`, "", "other", "--b"), want: "whisper", found: true},
		"the value not ended yet":           {front: modelPart},
		"the boundary at the end":           {front: modelPart + "\r\n--b"},
		"the boundary and a dash":           {front: modelPart + "\r\n--b-"},
		"the boundary and a line break":     {front: modelPart + "\r\n--b\r", want: "whisper", found: true},
		"the headers not ended yet":         {front: crlf("--b", `Content-Disposition: form-data; name="model"`)},
		"a header line that may be folded":  {front: crlf("--b", `Content-Disposition: form-data; name="model"`, "")},
		"the file first":                    {front: filePart + "\r\n" + modelPart[:20]},
		"not a form":                        {front: `{"model":"whisper"}`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, found := "", false
			if start, end, ok := FormModelPrefix([]byte(tc.front), "b"); ok {
				got, found = tc.front[start:end], true
			}
			if got != tc.want || found != tc.found {
				t.Errorf("FormModelPrefix = %q, %v; want %q, %v", got, found, tc.want, tc.found)
			}
		})
	}
}

// TestFormModelAllocations: reading the model of a plain upload makes one
// allocation, whatever its size and number of parts.
func TestFormModelAllocations(t *testing.T) {
	body := []byte(crlf("--b", `Content-Disposition: form-data; name="file"; filename="a.wav"`, "Content-Type: audio/wav", "", strings.Repeat("a", 1<<20),
		"--b", `Content-Disposition: form-data; name="language"`, "", "en",
		"--b", `Content-Disposition: form-data; name="model"`, "", "whisper", "--b--", ""))
	allocs := testing.AllocsPerRun(20, func() {
		if _, _, ok := FormModel(body, "b"); !ok {
			t.Fatal("no model")
		}
	})
	if allocs > 1 {
		t.Errorf("FormModel made %v allocations, want 1 at most", allocs)
	}
}

// referenceFormModel reads the model field as Go's multipart reader does.
func referenceFormModel(body []byte, boundary string) (string, bool) {
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	model, found := "", false
	for {
		p, err := r.NextRawPart()
		if errors.Is(err, io.EOF) {
			if !found {
				return "", false
			}
			return model, found
		}
		if err != nil {
			return "", false
		}
		if p.FormName() != "model" {
			continue
		}
		b, err := io.ReadAll(p)
		if err != nil {
			return "", false
		}
		model, found = string(b), identityEncoding([]byte(p.Header.Get("Content-Transfer-Encoding")))
	}
}

// referenceFirstModel reads the first model field as Go's multipart
// reader does, whatever follows it.
func referenceFirstModel(body []byte, boundary string) (string, bool) {
	r := multipart.NewReader(bytes.NewReader(body), boundary)
	for {
		p, err := r.NextRawPart()
		if err != nil {
			return "", false
		}
		if p.FormName() != "model" {
			continue
		}
		b, err := io.ReadAll(p)
		if err != nil || !identityEncoding([]byte(p.Header.Get("Content-Transfer-Encoding"))) {
			return "", false
		}
		return string(b), true
	}
}

func FuzzFormModel(f *testing.F) {
	f.Add("b", []byte(crlf("--b", `Content-Disposition: form-data; name="model"`, "", "m", "--b", `Content-Disposition: form-data; name="file"; filename="a"`, "", "x", "--b--", "")))
	f.Add("b", []byte("pre\n--b\nContent-Disposition: form-data; name=model\n\nm\n--b--"))
	f.Add("b", []byte(crlf("--b", `content-disposition: form-data; name="model"; filename*=utf-8''x`, " folded", "", "m", "--b--")))
	f.Add("xyz", []byte(crlf("--xyz", `Content-Disposition: form-data; name="model"`, "Content-Transfer-Encoding: base64", "", "bQ==", "--xyz--")))
	f.Add("b", []byte(crlf("--b", `Content-Disposition: form-data; name="model"`, "", "--b", "--b--")))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		if boundary == "" || strings.ContainsAny(boundary, "\r\n") {
			return // not a header value
		}
		want, wantFound := referenceFormModel(body, boundary)
		got, gotFound := "", false
		if start, end, ok := FormModel(body, boundary); ok {
			got, gotFound = string(body[start:end]), true
		}
		// An empty model field names no model: the picker routes such an
		// upload by load, found or not, so forms that end cut short after
		// an empty field (where Go's reader ends the form at the first
		// error that wraps io.EOF) need not agree on it.
		if got != want || (gotFound && got != "") != (wantFound && want != "") {
			t.Fatalf("FormModel(%q, %q) = %q, %v; mime/multipart reads %q, %v", body, boundary, got, gotFound, want, wantFound)
		}
		// A front that shows the first model field shows the one Go's
		// reader reads from the whole body, at the same place.
		first, firstFound := "", false
		for k := range min(len(body), 512) + 1 {
			start, end, ok := FormModelPrefix(body[:k], boundary)
			if !ok {
				continue
			}
			if !firstFound {
				first, firstFound = referenceFirstModel(body, boundary)
			}
			if !firstFound || first != string(body[start:end]) {
				t.Fatalf("FormModelPrefix(%q, %q) = %q; mime/multipart reads %q, %v from %q", body[:k], boundary, body[start:end], first, firstFound, body)
			}
			s2, e2, ok2 := FormModelPrefix(body, boundary)
			if !ok2 || s2 != start || e2 != end {
				t.Fatalf("FormModelPrefix(%q) = [%d:%d], its front %q gave [%d:%d]", body, s2, e2, body[:k], start, end)
			}
		}
	})
}
