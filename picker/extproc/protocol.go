package extproc

import (
	"encoding/json"
	"slices"
	"strings"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
)

// Header and metadata names of the endpoint-picker protocol.
const (
	// DestinationHeader carries the picked endpoint, then its fallbacks:
	// "ip:port[,ip:port...]". Also the key in the envoy.lb metadata namespace.
	DestinationHeader = "x-gateway-destination-endpoint"
	// ServedHeader names the endpoint that actually served the request, in the
	// envoy.lb namespace of the response metadata.
	ServedHeader = "x-gateway-destination-endpoint-served"
	// SubsetKey restricts the candidates, in the envoy.lb.subset_hint namespace.
	SubsetKey = "x-gateway-destination-endpoint-subset"

	lbNamespace     = "envoy.lb"
	subsetNamespace = "envoy.lb.subset_hint"

	// maxChunk is the largest body chunk returned to the gateway.
	maxChunk = 62000
)

// ownedHeaders are request headers removed before the request goes
// upstream: those only the picker may set (the destination is overwritten),
// and the objective, fairness and model-rewrite headers the picker consumes.
// The prefill pod's, the encode pods' and the data-parallel rank's headers
// are ones the picker alone sets: a client's would make the pod's sidecar
// send the prompt, the request's media or the request to any host it names.
var ownedHeaders = []string{ServedHeader, SubsetKey, ObjectiveHeader, FairnessHeader, ModelRewriteHeader, policy.PrefillerHeader, policy.EncodersHeader, policy.DataParallelHeader}

// The headers naming a request's other pods, as bits: a request whose pods
// the picker names keeps that header out of the removed list, its value
// overwriting the client's.
const (
	namesPrefiller = 1 << iota
	namesEncoder
	namesRank
)

// ownedHeadersNaming[m] are ownedHeaders but the headers the bits of m name.
var ownedHeadersNaming = func() (lists [namesRank << 1][]string) {
	named := [...]string{policy.PrefillerHeader, policy.EncodersHeader, policy.DataParallelHeader}
	for m := range lists {
		for _, h := range ownedHeaders {
			if i := slices.Index(named[:], h); i < 0 || m&(1<<i) == 0 {
				lists[m] = append(lists[m], h)
			}
		}
	}
	return lists
}()

// headerValue returns a header's value, preferring raw_value as Envoy sends
// it. It stays small enough to inline, so that a value only compared or
// parsed (a status, a length) is not copied to the heap.
func headerValue(h *corev3.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// textValue is headerValue for a value the picker keeps: a request id, an
// objective, a fairness id, a model name or a path become metric labels,
// span attributes and log values, all of which must be UTF-8. A header may
// carry any byte from 0x80 up (obs-text); one that is not valid UTF-8
// reads as U+FFFD.
func textValue(h *corev3.HeaderValue) string {
	v := headerValue(h)
	if !utf8.ValidString(v) {
		v = strings.ToValidUTF8(v, "\uFFFD")
	}
	return v
}

// commonPaths are the :path values most requests carry; pathValue returns
// them as these strings, so that reading the path of a typical request
// costs no allocation.
var commonPaths = [...]string{"/v1/chat/completions", "/v1/completions", "/v1/responses", "/v1/embeddings", openai.GeneratePath, openai.EmbedPath}

// pathValue is headerValue for the :path header.
func pathValue(h *corev3.HeaderValue) string {
	raw := h.GetRawValue()
	for _, p := range commonPaths {
		if string(raw) == p {
			return p
		}
	}
	return textValue(h)
}

// pathOnly is path without its query string, which may carry a credential
// (an api-key parameter, as some OpenAI clients send it): what logs and
// spans name.
func pathOnly(path string) string {
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		return path[:i]
	}
	return path
}

// maxLoggedValue bounds what a log line or a span carries of a value a
// client chose (a model name, an error naming one): the body it came from
// may be megabytes.
const maxLoggedValue = 512

// clip cuts s to maxLoggedValue bytes at most, on a character boundary,
// marking the cut.
func clip(s string) string {
	if len(s) <= maxLoggedValue {
		return s
	}
	i := maxLoggedValue
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "..."
}

func setHeader(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, RawValue: []byte(value)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}

// immediate is a local reply from the gateway with an OpenAI-style JSON error.
func immediate(status int, message string) *extprocv3.ProcessingResponse {
	type apiError struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    int    `json:"code"`
	}
	body, _ := json.Marshal(struct {
		Error apiError `json:"error"`
	}{apiError{Message: message, Type: errorType(status), Code: status}})
	headers := []*corev3.HeaderValueOption{setHeader("content-type", "application/json")}
	if status == 429 {
		// Overload passes: tell the client when to try again.
		headers = append(headers, setHeader("retry-after", "1"))
	}
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{
			Status:  &typev3.HttpStatus{Code: typev3.StatusCode(status)},
			Headers: &extprocv3.HeaderMutation{SetHeaders: headers},
			Body:    body,
			Details: "inferpick_" + errorType(status),
		},
	}}
}

func errorType(status int) string {
	switch status {
	case 400, 415:
		return "invalid_request_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "overloaded"
	case 503:
		return "no_endpoint"
	default:
		return "internal_error"
	}
}
