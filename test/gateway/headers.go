package gateway

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"golang.org/x/net/http/httpguts"
)

// headerList is an ordered header map with lower-case keys, pseudo-headers first,
// the shape of Envoy's HeaderMap.
type headerList struct {
	entries []*corev3.HeaderValue
}

func (h *headerList) values(key string) []string {
	var out []string
	for _, e := range h.entries {
		if e.GetKey() == key {
			out = append(out, string(e.GetRawValue()))
		}
	}
	return out
}

func (h *headerList) get(key string) string {
	if v := h.values(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

func (h *headerList) add(key, value string) {
	h.entries = append(h.entries, &corev3.HeaderValue{Key: key, RawValue: []byte(value)})
}

// set replaces every value of key, keeping the position of the first one.
func (h *headerList) set(key, value string) {
	first := -1
	out := h.entries[:0]
	for _, e := range h.entries {
		if e.GetKey() == key {
			if first >= 0 {
				continue
			}
			first = len(out)
			e = &corev3.HeaderValue{Key: key, RawValue: []byte(value)}
		}
		out = append(out, e)
	}
	h.entries = out
	if first < 0 {
		h.add(key, value)
	}
}

func (h *headerList) del(key string) {
	h.entries = slices.DeleteFunc(h.entries, func(e *corev3.HeaderValue) bool { return e.GetKey() == key })
}

func (h *headerList) proto() *corev3.HeaderMap {
	return &corev3.HeaderMap{Headers: slices.Clone(h.entries)}
}

// httpHeader returns the regular (non-pseudo) headers.
func (h *headerList) httpHeader() http.Header {
	out := http.Header{}
	for _, e := range h.entries {
		if !strings.HasPrefix(e.GetKey(), ":") {
			out.Add(e.GetKey(), string(e.GetRawValue()))
		}
	}
	return out
}

// hopByHop are the connection-level headers a proxy never forwards.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"upgrade": true, "te": true, "trailer": true, "proxy-authenticate": true, "proxy-authorization": true,
}

func appendHeaders(h *headerList, in http.Header) {
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range in[k] {
			h.add(lk, v)
		}
	}
}

// requestHeaders builds the request's HeaderMap as Envoy's HTTP connection manager
// hands it to the filter chain.
func requestHeaders(r *http.Request, requestID string) *headerList {
	h := &headerList{}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h.add(":authority", r.Host)
	h.add(":path", r.URL.RequestURI())
	h.add(":method", r.Method)
	h.add(":scheme", scheme)
	appendHeaders(h, r.Header)
	if h.get("content-length") == "" && r.ContentLength > 0 {
		h.add("content-length", strconv.FormatInt(r.ContentLength, 10))
	}
	if h.get("x-forwarded-proto") == "" {
		h.add("x-forwarded-proto", scheme)
	}
	if h.get("x-request-id") == "" {
		h.add("x-request-id", requestID)
	}
	return h
}

// responseHeaders builds the response's HeaderMap with :status first.
func responseHeaders(resp *http.Response) *headerList {
	h := &headerList{}
	h.add(":status", strconv.Itoa(resp.StatusCode))
	appendHeaders(h, resp.Header)
	if h.get("content-length") == "" && resp.ContentLength >= 0 {
		h.add("content-length", strconv.FormatInt(resp.ContentLength, 10))
	}
	return h
}

// errMutation is a header mutation Envoy rejects with a 500.
var errMutation = errors.New("invalid header mutation")

// mutable applies Envoy's default HeaderMutationRules: routing headers and x-envoy-*
// may not be touched; pseudo-headers may not be removed.
func mutable(key string, remove bool) bool {
	switch {
	case key == "host" || key == ":authority" || key == ":scheme" || key == ":method":
		return false
	case strings.HasPrefix(key, "x-envoy-"):
		return false
	case remove && strings.HasPrefix(key, ":"):
		return false
	}
	return true
}

func validName(key string) bool {
	name := strings.TrimPrefix(key, ":")
	return name != "" && httpguts.ValidHeaderFieldName(name)
}

// applyMutation applies a HeaderMutation like Envoy's MutationUtils. It returns the
// number of ignored (rejected) mutations, and an error for one that fails the request.
func applyMutation(h *headerList, m *extprocv3.HeaderMutation, dropContentLength bool) (int, error) {
	rejected := 0
	for _, key := range m.GetRemoveHeaders() {
		key = strings.ToLower(key)
		if !validName(key) {
			return rejected, fmt.Errorf("%w: remove %q", errMutation, key)
		}
		if !mutable(key, true) {
			rejected++
			continue
		}
		h.del(key)
	}
	for _, opt := range m.GetSetHeaders() {
		hv := opt.GetHeader()
		if hv == nil {
			continue
		}
		key := strings.ToLower(hv.GetKey())
		if dropContentLength && key == "content-length" {
			continue
		}
		if hv.GetValue() != "" && len(hv.GetRawValue()) > 0 {
			return rejected, fmt.Errorf("%w: %q sets both value and raw_value", errMutation, key)
		}
		value := string(hv.GetRawValue())
		if !validName(key) || !httpguts.ValidHeaderFieldValue(value) {
			return rejected, fmt.Errorf("%w: set %q", errMutation, key)
		}
		if !mutable(key, false) {
			rejected++
			continue
		}
		if key == ":status" {
			if code, err := strconv.Atoi(value); err != nil || code < 200 || code > 599 {
				return rejected, fmt.Errorf("%w: :status %q", errMutation, value)
			}
		}
		exists := len(h.values(key)) > 0
		// Envoy still honours the deprecated append field ahead of append_action,
		// and pickers in the wild still set it, so the stand-in must too.
		legacyAppend := opt.GetAppend() //nolint:staticcheck // Envoy honours the deprecated append field; the stand-in must behave the same.
		switch {
		case legacyAppend != nil && legacyAppend.GetValue():
			h.add(key, value)
		case legacyAppend != nil:
			h.set(key, value)
		case opt.GetAppendAction() == corev3.HeaderValueOption_ADD_IF_ABSENT:
			if !exists {
				h.add(key, value)
			}
		case opt.GetAppendAction() == corev3.HeaderValueOption_OVERWRITE_IF_EXISTS:
			if exists {
				h.set(key, value)
			}
		default:
			// ext_proc has always overwritten when append is unset.
			h.set(key, value)
		}
	}
	return rejected, nil
}
