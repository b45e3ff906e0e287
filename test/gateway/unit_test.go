package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func TestParseEndpoints(t *testing.T) {
	cases := map[string]struct {
		in      string
		want    []string
		wantErr bool
	}{
		"one":               {in: "10.0.0.1:8000", want: []string{"10.0.0.1:8000"}},
		"fallbacks":         {in: "10.0.0.1:8000, 10.0.0.2:8000,10.0.0.3:9000", want: []string{"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:9000"}},
		"ipv6":              {in: "[2600:4040:5204::1574:24ae]:80", want: []string{"[2600:4040:5204::1574:24ae]:80"}},
		"invalid skipped":   {in: "pod-a:8000,10.0.0.2:8000,10.0.0.3", want: []string{"10.0.0.2:8000"}},
		"no valid entry":    {in: "pod-a:8000", wantErr: true},
		"empty":             {in: "", wantErr: true},
		"port out of range": {in: "10.0.0.1:70000", wantErr: true},
		"port zero":         {in: "10.0.0.1:0", wantErr: true},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			got, err := ParseEndpoints(tc.in)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func FuzzParseEndpoints(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "10.0.0.1:8000,10.0.0.2:8001", "[::1]:80", "a:b,,c", ":", "1.2.3.4:65536"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, err := ParseEndpoints(s)
		if err != nil {
			return
		}
		for _, ep := range eps {
			again, err := ParseEndpoints(ep)
			if err != nil || len(again) != 1 || again[0] != ep {
				t.Fatalf("endpoint %q does not parse back to itself: %v %v", ep, again, err)
			}
		}
	})
}

func TestApplyMutation(t *testing.T) {
	opt := func(k, v string) *corev3.HeaderValueOption {
		return &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: k, RawValue: []byte(v)}}
	}
	cases := map[string]struct {
		mutation     *extprocv3.HeaderMutation
		dropCL       bool
		want         map[string][]string
		wantRejected int
		wantErr      bool
	}{
		"set and remove": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "2"), opt("x-new", "n")}, RemoveHeaders: []string{"x-b"}},
			want:     map[string][]string{"x-a": {"2"}, "x-new": {"n"}},
		},
		"routing and envoy headers are ignored": {
			mutation:     &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":authority", "evil"), opt("host", "evil"), opt("x-envoy-x", "1")}, RemoveHeaders: []string{":path"}},
			want:         map[string][]string{"x-a": {"1"}, "x-b": {"1"}},
			wantRejected: 4,
		},
		"path may change": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt(":path", "/v2")}},
			want:     map[string][]string{":path": {"/v2"}, "x-a": {"1"}, "x-b": {"1"}},
		},
		"content-length dropped in full duplex": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("content-length", "9")}},
			dropCL:   true,
			want:     map[string][]string{"x-a": {"1"}, "x-b": {"1"}},
		},
		"append": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", RawValue: []byte("2")}, Append: wrapperspb.Bool(true)}}},
			want:     map[string][]string{"x-a": {"1", "2"}, "x-b": {"1"}},
		},
		"value and raw_value both set": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: "x-a", Value: "v", RawValue: []byte("r")}}}},
			wantErr:  true,
		},
		"invalid value": {
			mutation: &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{opt("x-a", "bad\nvalue")}},
			wantErr:  true,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			h := &headerList{}
			h.add(":path", "/v1")
			h.add("x-a", "1")
			h.add("x-b", "1")
			rejected, err := applyMutation(h, tc.mutation, tc.dropCL)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if tc.wantErr {
				return
			}
			got := map[string][]string{}
			for _, e := range h.entries {
				got[e.GetKey()] = append(got[e.GetKey()], string(e.GetRawValue()))
			}
			if _, ok := tc.want[":path"]; !ok {
				delete(got, ":path")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("headers (-want +got):\n%s", diff)
			}
			if rejected != tc.wantRejected {
				t.Errorf("rejected = %d, want %d", rejected, tc.wantRejected)
			}
		})
	}
}

func TestChunkQueueReplaysForEachReader(t *testing.T) {
	q := newChunkQueue()
	first := q.reader(context.Background())
	for _, c := range []string{"ab", "", "cd"} {
		if err := q.append([]byte(c), false); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.append([]byte("e"), true); err != nil {
		t.Fatal(err)
	}
	if err := q.append([]byte("late"), true); err == nil {
		t.Error("chunk after end_of_stream accepted")
	}
	for name, r := range map[string]io.Reader{"first": first, "replay": q.reader(context.Background())} {
		b, err := io.ReadAll(r)
		if err != nil || string(b) != "abcde" {
			t.Errorf("%s reader: %q, %v", name, b, err)
		}
	}
}

// Freeing the pump once the downstream body was read to its end must leave
// the keep-alive connection usable: net/http then reads ahead on it, and a
// cut of that read would cancel the context of every later request on the
// connection, which the client would see fail.
func TestACompleteBodyLeavesItsConnectionUsable(t *testing.T) {
	first := true
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Context().Err() != nil {
			http.Error(w, "request context canceled on arrival", http.StatusInternalServerError)
			return
		}
		f := &flow{w: w, r: r, body: &clientBody{r: r.Body, left: r.ContentLength}}
		if _, err := io.Copy(io.Discard, f.body); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		f.cutRead()
		if first {
			// A failed read ahead cancels the context at once; give it the
			// time to show before answering.
			first = false
			select {
			case <-r.Context().Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	t.Cleanup(srv.Close)
	conns := 0
	for i := range 3 {
		req := newRequest(t, http.MethodPost, srv.URL, `{"model":"m"}`)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(c httptrace.GotConnInfo) {
				if !c.Reused {
					conns++
				}
			},
		}))
		if resp, body := do(t, req); resp.StatusCode != http.StatusOK {
			t.Fatalf("request %d: status %d: %s", i, resp.StatusCode, body)
		}
	}
	if conns != 1 {
		t.Errorf("%d connections for 3 requests, want one kept alive", conns)
	}
}
