package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
)

// PrefillerHeader names the prefill pod that computes a request's prompt
// before this pod decodes it, as llm-d's routing sidecar reads it.
const PrefillerHeader = "x-prefiller-host-port"

// remoteDecode is the kv_transfer_params of the request sent to the prefill
// pod: compute the prompt's KV and keep it for a decode pod to pull, as
// llm-d's sidecar asks vLLM's NIXL connector.
var remoteDecode = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// prefiller returns the prefill pod a request names: the first of the
// comma-separated entries of its PrefillerHeader, "http://" allowed before
// it, as llm-d's sidecar reads them. No header, or an empty first entry,
// names none.
func prefiller(h http.Header) (string, error) {
	values := h.Values(PrefillerHeader)
	if len(values) == 0 {
		return "", nil
	}
	first, _, _ := strings.Cut(values[0], ",")
	first = strings.TrimSpace(first)
	if first == "" {
		return "", nil
	}
	hostPort := strings.TrimPrefix(first, "http://")
	if !validHostPort(hostPort) {
		return "", fmt.Errorf("%s %q is not a host:port", PrefillerHeader, first)
	}
	return hostPort, nil
}

// validHostPort reports whether hp is a host, or a bracketed IPv6 address,
// and a port from 1 to 65535, and nothing else.
func validHostPort(hp string) bool {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || host == "" {
		return false
	}
	if n, err := strconv.ParseUint(port, 10, 16); err != nil || n == 0 || strconv.FormatUint(n, 10) != port {
		return false
	}
	u, err := url.Parse("http://" + hp)
	return err == nil && u.Host == hp && u.Path == "" && u.RawQuery == "" && u.Fragment == "" && u.User == nil
}

// prefillBody is the body sent to the prefill pod: the client's request
// with max_tokens and max_completion_tokens 1, stream false and no
// stream_options, and kv_transfer_params asking for a remote decode, as
// llm-d's sidecar sends it. Every other field is kept as it came.
func prefillBody(body []byte) ([]byte, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return nil, err
	}
	if fields == nil {
		return nil, errors.New("the body is not a JSON object")
	}
	one := json.RawMessage("1")
	fields["max_tokens"], fields["max_completion_tokens"] = one, one
	fields["stream"] = json.RawMessage("false")
	delete(fields, "stream_options")
	fields["kv_transfer_params"] = remoteDecode
	return json.Marshal(fields)
}

// checkPrefillAnswer checks that the prefill pod answered with a JSON
// object, whose kv_transfer_params llm-d's sidecar hands to the decode.
func checkPrefillAnswer(body []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return err
	}
	if fields == nil {
		return errors.New("the answer is not a JSON object")
	}
	return nil
}

// sidecar plays llm-d's routing sidecar in front of this pod. A request
// naming encode pods has its multimodal items encoded there first
// (encode.go). A request naming a prefill pod is first sent there, on the same path, to compute
// its prompt (a max_tokens 1 request); once that answers, this pod pulls
// the prompt's KV instead of computing it. It reports whether the prompt
// came from a prefill pod, and whether the request goes on to this pod's
// engine; when it does not, the client has its answer.
//
// As llm-d's sidecar does, a prefill pod that answers a client error
// (400 to 451) has that answer passed to the client; one that answers
// another error, or cannot be reached in time, leaves the request to be
// served here as if no prefill pod were named.
func (s *Server) sidecar(w http.ResponseWriter, r *http.Request, body []byte) (remote, goOn bool) {
	if !s.encode(w, r, body) {
		return false, false
	}
	hostPort, err := prefiller(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return false, false
	}
	if hostPort == "" {
		return false, true
	}
	pbody, err := prefillBody(body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "", err.Error())
		return false, false
	}
	status, answer, err := s.callPrefill(r.Context(), "http://"+hostPort+r.URL.Path, pbody)
	switch {
	case r.Context().Err() != nil:
		return false, false // the client left: nobody to answer
	case err != nil:
		s.prefillFallbacks.Add(1)
		return false, true
	case status >= http.StatusBadRequest && status <= http.StatusUnavailableForLegalReasons:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(answer)
		return false, false
	case status < http.StatusOK || status >= http.StatusMultipleChoices:
		s.prefillFallbacks.Add(1)
		return false, true
	}
	if err := checkPrefillAnswer(answer); err != nil {
		writeError(w, http.StatusBadRequest, "", "the prefill pod's answer: "+err.Error())
		return false, false
	}
	s.prefilled.Add(1)
	return true, true
}

// callPrefill posts body to target within the prefill timeout, and returns the
// answer's status and body.
func (s *Server) callPrefill(ctx context.Context, target string, body []byte) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PrefillTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.prefillClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return 0, nil, err
	}
	return resp.StatusCode, answer, nil
}
