package server

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// A pod's primary port serves rank 0 itself and passes a request naming
// rank 1 to rank 1's port, the header dropped; a request naming an address
// that is no rank of the pod is answered 400, and one naming none is
// served as it is. As llm-d's sidecar, only a POST to chat completions,
// completions or responses is sent to the rank it names: any other request
// is served by rank 0, whatever it names.
func TestDataParallelSidecarSendsARequestToTheRankItNames(t *testing.T) {
	tag := func(name string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, name+" "+r.Header.Get(DataParallelHeader))
		})
	}
	rank1 := httptest.NewServer(tag("rank1"))
	defer rank1.Close()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(rank1.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	port1, _ := strconv.Atoi(p)
	primary := port1 - 1 // rank 0's, the primary port: its server is next itself
	front := httptest.NewServer(DataParallelSidecar(tag("rank0"), "127.0.0.1", primary, 2))
	defer front.Close()

	rank1Addr := "127.0.0.1:" + p
	cases := map[string]struct {
		method, path string
		header       string
		wantStatus   int
		want         string
	}{
		"rank 0":                {"POST", "/v1/completions", "127.0.0.1:" + strconv.Itoa(primary), 200, "rank0 "},
		"rank 1":                {"POST", "/v1/completions", rank1Addr, 200, "rank1 "},
		"rank 1, a chat":        {"POST", "/v1/chat/completions", rank1Addr, 200, "rank1 "},
		"rank 1, responses":     {"POST", "/v1/responses?x=1", rank1Addr, 200, "rank1 "},
		"no header":             {"POST", "/v1/completions", "", 200, "rank0 "},
		"a port past the ranks": {"POST", "/v1/completions", "127.0.0.1:" + strconv.Itoa(port1+1), 400, "names no data-parallel rank"},
		"another pod's rank":    {"POST", "/v1/completions", "127.0.0.2:" + p, 400, "names no data-parallel rank"},
		"embeddings":            {"POST", "/v1/embeddings", rank1Addr, 200, "rank0 " + rank1Addr},
		"another prefix":        {"POST", "/openai/v1/chat/completions", rank1Addr, 200, "rank0 " + rank1Addr},
		"a GET":                 {"GET", "/v1/completions", rank1Addr, 200, "rank0 " + rank1Addr},
		"no rank, embeddings":   {"POST", "/v1/embeddings", "127.0.0.2:" + p, 200, "rank0 "},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), tc.method, front.URL+tc.path, strings.NewReader("{}"))
			if err != nil {
				t.Fatal(err)
			}
			if tc.header != "" {
				req.Header.Set(DataParallelHeader, tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.wantStatus || !strings.Contains(string(body), tc.want) {
				t.Errorf("answered %d %q, want %d with %q", resp.StatusCode, body, tc.wantStatus, tc.want)
			}
		})
	}
}
