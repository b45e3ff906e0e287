package fileconfig

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/session"
)

// llm-d's session-affinity plugins.
const (
	sessionScorer = "session-affinity-scorer"
	sessionFilter = "session-affinity-filter"
)

// encodedEndpointHeader is the stateless algorithm of llm-d's session
// plugins, the one translated: the token is the base64 of the pod's
// namespace/name, which every picker replica reads alike.
const encodedEndpointHeader = "encoded_endpoint_header"

// statefulSession says what to use instead of the stateful algorithms.
const statefulSession = "it keeps a table of sessions on each router replica; use encoded_endpoint_header (the default), whose token names the pod and reads alike on every picker replica"

// readSessionScorer reads session-affinity-scorer: its header, for the
// stateless algorithm.
func (u *upstream) readSessionScorer(p plugin) error {
	header := ""
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "algorithm":
			if v.Value != encodedEndpointHeader && v.Value != "" {
				return fmt.Errorf("line %d: %s algorithm %q is not supported: %s", v.Line, sessionScorer, v.Value, statefulSession)
			}
		case "headerName":
			header = v.Value
		case "profileName":
			if err := sessionProfile(p.typ, v); err != nil {
				return err
			}
		case "evictionTtlSeconds", "evictionSweepSeconds", "missThreshold":
			inert = append(inert, k.Value)
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, sessionScorer, k.Value)
		}
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("%s parameters %s have no effect: they tune the session_id_header algorithm", sessionScorer, strings.Join(inert, ", ")))
	}
	return u.setSessionHeader(p, header)
}

// readSessionFilter reads session-affinity-filter: its header, for the
// stateless strategy.
func (u *upstream) readSessionFilter(p plugin) error {
	header := ""
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "strategy":
			if v.Value != encodedEndpointHeader && v.Value != "" {
				return fmt.Errorf("line %d: %s strategy %q is not supported: %s", v.Line, sessionFilter, v.Value, statefulSession)
			}
		case "encodedEndpointHeaderConfig":
			if v.Kind != yaml.MappingNode && !isNull(v) {
				return fmt.Errorf("line %d: %s encodedEndpointHeaderConfig must be a mapping", v.Line, sessionFilter)
			}
			for j := 0; j+1 < len(v.Content); j += 2 {
				if f := v.Content[j]; f.Value != "header" {
					return fmt.Errorf("line %d: unknown %s encodedEndpointHeaderConfig field %q", f.Line, sessionFilter, f.Value)
				}
				header = v.Content[j+1].Value
			}
		case "sessionIdConfig":
			u.warn(fmt.Sprintf("%s sessionIdConfig has no effect: it configures the session_id strategy", sessionFilter))
		case "profileName":
			if err := sessionProfile(p.typ, v); err != nil {
				return err
			}
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, sessionFilter, k.Value)
		}
	}
	return u.setSessionHeader(p, header)
}

// setSessionHeader records the session plugin's header, as llm-d reads it:
// trimmed, in lower case, x-session-token when empty.
func (u *upstream) setSessionHeader(p plugin, header string) error {
	h := strings.ToLower(strings.TrimSpace(header))
	if h == "" {
		h = session.DefaultHeader
	}
	if !session.ValidHeader(h) {
		return fmt.Errorf("line %d: %s header %q is not an HTTP header name", p.line, p.typ, header)
	}
	u.sessionHeaders[p.name] = h
	return nil
}

// sessionProfile refuses a profileName other than the one profile's.
func sessionProfile(typ string, v *yaml.Node) error {
	if v.Value == "" {
		return nil
	}
	return fmt.Errorf("line %d: %s profileName %q is not supported: it names the pod of another profile (prefill/decode disaggregation); %s", v.Line, typ, v.Value, disaggregation)
}

// sessionAffinity sets the policy's session affinity from the session
// plugins of the profile: a filter pins the session to its pod; a scorer,
// in the weighted scorer, weighs it (mode prefer), and pins it when the
// policy weighs nothing else or is cache-aware. Every plugin must name one
// header: the picker writes one token.
func (u *upstream) sessionAffinity(scorers, filters []string, ws *policy.WeightedScorerConfig, cacheAware bool) error {
	all := append(append([]string(nil), filters...), scorers...)
	if len(all) == 0 {
		return nil
	}
	header := u.sessionHeaders[all[0]]
	for _, name := range all[1:] {
		if h := u.sessionHeaders[name]; h != header {
			return fmt.Errorf("session plugins %q and %q name different headers (%s, %s): the picker writes one session token; keep one plugin, or give them one header", all[0], name, header, h)
		}
	}
	sa := &policy.SessionAffinityConfig{Header: header, Mode: policy.SessionPin}
	switch {
	case len(filters) > 0:
		if len(scorers) > 0 {
			u.warn(fmt.Sprintf("%s has no effect beside %s: the filter already keeps the session on its pod", sessionScorer, sessionFilter))
		}
		ws.SessionWeight = 0
	case ws.SessionWeight == 0:
		u.warn(fmt.Sprintf("%s weighted 0 has no effect", sessionScorer))
		ws.SessionWeight = 0
		return nil
	case cacheAware:
		u.warn(fmt.Sprintf("%s becomes a pin beside precise-prefix-cache-scorer: the cache-aware policy weighs no scores, so a session goes to its pod unless that pod is saturated (as %s does)", sessionScorer, sessionFilter))
		ws.SessionWeight = 0
	case *ws == (policy.WeightedScorerConfig{SessionWeight: ws.SessionWeight}):
		// The only score: the session's pod wins wherever it is a
		// candidate, and the others tie.
		ws.SessionWeight = 0
	default:
		sa.Mode = policy.SessionPrefer
	}
	u.out.Policy.SessionAffinity = sa
	return nil
}
