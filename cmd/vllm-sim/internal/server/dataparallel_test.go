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
// served as it is.
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

	cases := map[string]struct {
		header     string
		wantStatus int
		want       string
	}{
		"rank 0":                {"127.0.0.1:" + strconv.Itoa(primary), 200, "rank0 "},
		"rank 1":                {"127.0.0.1:" + p, 200, "rank1 "},
		"no header":             {"", 200, "rank0 "},
		"a port past the ranks": {"127.0.0.1:" + strconv.Itoa(port1+1), 400, "names no data-parallel rank"},
		"another pod's rank":    {"127.0.0.2:" + p, 400, "names no data-parallel rank"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, front.URL+"/v1/completions", strings.NewReader("{}"))
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
