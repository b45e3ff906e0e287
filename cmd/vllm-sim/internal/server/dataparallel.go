package server

import (
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
)

// DataParallelHeader names the data-parallel rank (host:port) of a pod
// that llm-d's routing sidecar, on the pod's primary port, sends a request
// to.
const DataParallelHeader = "x-data-parallel-host-port"

// DataParallelSidecar plays llm-d's routing sidecar on the primary port of
// a pod that serves ranks data-parallel ranks each on a port of its own:
// host:port (rank 0, served by next) and host:port+r for r below ranks,
// each another server (vLLM's external data-parallel balancer runs a
// server per rank). A POST to /v1/chat/completions, /v1/completions or
// /v1/responses whose DataParallelHeader names one of them goes there; one
// that names any other address is answered 400, as the sidecar does; one
// without the header is served by next. Any other request is served by
// next, rank 0, whatever it names, as the sidecar reads the header on
// those three paths alone.
func DataParallelSidecar(next http.Handler, host string, port, ranks int) http.Handler {
	routes := map[string]http.Handler{net.JoinHostPort(host, strconv.Itoa(port)): next}
	for r := 1; r < ranks; r++ {
		addr := net.JoinHostPort(host, strconv.Itoa(port+r))
		proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: addr})
		proxy.FlushInterval = -1 // a stream's events as they come
		routes[addr] = proxy
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get(DataParallelHeader)
		if target == "" || !reachesRank(r) {
			next.ServeHTTP(w, r)
			return
		}
		h, ok := routes[target]
		if !ok {
			writeError(w, http.StatusBadRequest, "", DataParallelHeader+" "+strconv.Quote(target)+" names no data-parallel rank of this pod")
			return
		}
		r.Header.Del(DataParallelHeader)
		h.ServeHTTP(w, r)
	})
}

// reachesRank reports whether llm-d's sidecar reads DataParallelHeader on
// r: a POST to one of the paths it splits.
func reachesRank(r *http.Request) bool {
	switch r.URL.Path {
	case "/v1/chat/completions", "/v1/completions", "/v1/responses":
		return r.Method == http.MethodPost
	}
	return false
}
