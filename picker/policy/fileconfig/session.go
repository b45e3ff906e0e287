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

// The algorithms of llm-d's session plugins. encodedEndpointHeader is
// stateless: the token is the base64 of the pod's namespace/name, which
// every picker replica reads alike. The session-id ones (the scorer's
// sessionIDHeader, the filter's sessionIDStrategy) keep a table from the
// client's id to a pod on each router replica; the picker places an id by
// rendezvous hashing instead (policy key id), which needs no table.
const (
	encodedEndpointHeader = "encoded_endpoint_header"
	sessionIDHeader       = "session_id_header"
	sessionIDStrategy     = "session_id"
)

// noTable says why llm-d's table parameters do nothing here.
const noTable = "the picker keeps no table of sessions to evict or migrate: a session id goes to the pod its rendezvous hash names, on every replica alike"

// sessionSource is what a session plugin reads: its header, and whether
// that carries a token or an id (policy.SessionToken, policy.SessionID).
type sessionSource struct{ header, key string }

// readSessionScorer reads session-affinity-scorer and readSessionFilter
// session-affinity-filter: their header, and what it carries.
func (u *upstream) readSessionScorer(p plugin) error { return u.readSessionPlugin(p) }

func (u *upstream) readSessionFilter(p plugin) error { return u.readSessionPlugin(p) }

// readSessionPlugin reads a session plugin's parameters in the spellings
// llm-d's versions give them: the algorithm as algorithm or strategy; the
// token's header as headerName or encodedEndpointHeaderConfig.header; the
// id's as headerName or sessionIdConfig's one header source. An id read
// from headerName alone defaults to x-session-token, as llm-d's scorer of
// that spelling reads it; otherwise to x-session-id.
func (u *upstream) readSessionPlugin(p plugin) error {
	var tokenConfig, idConfig *yaml.Node
	header, key := "", policy.SessionToken
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "algorithm", "strategy":
			switch v.Value {
			case encodedEndpointHeader, "":
			case sessionIDHeader, sessionIDStrategy:
				key = policy.SessionID
			default:
				return fmt.Errorf("line %d: %s %s %q is not supported: use %s, or %s (%s in the scorer's spelling)", v.Line, p.typ, k.Value, v.Value, encodedEndpointHeader, sessionIDStrategy, sessionIDHeader)
			}
		case "headerName":
			header = v.Value
		case "encodedEndpointHeaderConfig", "sessionIdConfig":
			if v.Kind != yaml.MappingNode && !isNull(v) {
				return fmt.Errorf("line %d: %s %s must be a mapping", v.Line, p.typ, k.Value)
			}
			if k.Value == "sessionIdConfig" {
				idConfig = v
			} else {
				tokenConfig = v
			}
		case "profileName":
			if v.Value != "" {
				u.sessionProfiles = append(u.sessionProfiles, sessionProfileRef{typ: p.typ, profile: v.Value, line: v.Line})
			}
		case "evictionTtlSeconds", "evictionSweepSeconds", "missThreshold":
			inert = append(inert, k.Value)
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, p.typ, k.Value)
		}
	}
	switch {
	case len(inert) == 0:
	case key == policy.SessionID:
		u.warn(fmt.Sprintf("%s parameters %s have no effect: %s", p.typ, strings.Join(inert, ", "), noTable))
	default:
		u.warn(fmt.Sprintf("%s parameters %s have no effect: they tune the %s algorithm", p.typ, strings.Join(inert, ", "), sessionIDHeader))
	}
	if key == policy.SessionID {
		if tokenConfig != nil {
			u.warn(fmt.Sprintf("%s encodedEndpointHeaderConfig has no effect: it configures the %s strategy", p.typ, encodedEndpointHeader))
		}
		def := session.DefaultIDHeader
		if idConfig == nil && p.typ == sessionScorer {
			def = session.DefaultHeader // llm-d's scorer reads x-session-token for ids too
		}
		if idConfig != nil {
			h, err := u.readSessionIDConfig(p.typ, idConfig)
			if err != nil {
				return err
			}
			if header != "" && h != "" && !strings.EqualFold(strings.TrimSpace(header), strings.TrimSpace(h)) {
				return fmt.Errorf("line %d: %s headerName %q and sessionIdConfig's header %q differ: the picker reads one session header", p.line, p.typ, header, h)
			}
			if h != "" {
				header = h
			}
		}
		return u.setSession(p, header, def, key)
	}
	if idConfig != nil {
		u.warn(fmt.Sprintf("%s sessionIdConfig has no effect: it configures the %s strategy", p.typ, sessionIDStrategy))
	}
	for j := 0; tokenConfig != nil && j+1 < len(tokenConfig.Content); j += 2 {
		if f := tokenConfig.Content[j]; f.Value != "header" {
			return fmt.Errorf("line %d: unknown %s encodedEndpointHeaderConfig field %q", f.Line, p.typ, f.Value)
		}
		h := tokenConfig.Content[j+1].Value
		if header != "" && h != "" && !strings.EqualFold(strings.TrimSpace(header), strings.TrimSpace(h)) {
			return fmt.Errorf("line %d: %s headerName %q and encodedEndpointHeaderConfig's header %q differ: the picker reads one session header", p.line, p.typ, header, h)
		}
		if h != "" {
			header = h
		}
	}
	return u.setSession(p, header, session.DefaultHeader, key)
}

// readSessionIDConfig reads the filter's sessionIdConfig (nil when absent)
// and returns the header of its one source, "" for llm-d's default. A
// request attribute has no counterpart (inferpick reads headers alone),
// and the picker reads one header: several sources are refused.
func (u *upstream) readSessionIDConfig(typ string, c *yaml.Node) (string, error) {
	header := ""
	var inert []string
	for j := 0; c != nil && j+1 < len(c.Content); j += 2 {
		f, v := c.Content[j], c.Content[j+1]
		switch f.Value {
		case "sources":
			if isNull(v) {
				continue
			}
			if v.Kind != yaml.SequenceNode {
				return "", fmt.Errorf("line %d: %s sessionIdConfig.sources must be a list", v.Line, typ)
			}
			if len(v.Content) > 1 {
				return "", fmt.Errorf("line %d: %s sessionIdConfig.sources lists %d sources: the picker reads a session id from one header; keep one header source", v.Line, typ, len(v.Content))
			}
			for _, src := range v.Content {
				h, err := sessionIDSource(typ, src)
				if err != nil {
					return "", err
				}
				header = h
			}
		case "evictionTtlSeconds", "evictionSweepSeconds":
			inert = append(inert, f.Value)
		default:
			return "", fmt.Errorf("line %d: unknown %s sessionIdConfig field %q", f.Line, typ, f.Value)
		}
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("%s sessionIdConfig %s have no effect: %s", typ, strings.Join(inert, ", "), noTable))
	}
	return header, nil
}

// sessionIDSource reads one source of sessionIdConfig: a header, which it
// returns; an attribute is refused by name.
func sessionIDSource(typ string, src *yaml.Node) (string, error) {
	if src.Kind != yaml.MappingNode {
		return "", fmt.Errorf("line %d: %s sessionIdConfig source must be a mapping with header or attribute", src.Line, typ)
	}
	header, set := "", 0
	for j := 0; j+1 < len(src.Content); j += 2 {
		f, v := src.Content[j], src.Content[j+1]
		switch f.Value {
		case "header":
			header, set = v.Value, set+1
		case "attribute":
			return "", fmt.Errorf("line %d: %s sessionIdConfig source attribute %q is not supported: inferpick has no request attributes; send the session id in a header and name it as the source", v.Line, typ, v.Value)
		default:
			return "", fmt.Errorf("line %d: unknown %s sessionIdConfig source field %q", f.Line, typ, f.Value)
		}
	}
	if set == 0 || strings.TrimSpace(header) == "" {
		return "", fmt.Errorf("line %d: %s sessionIdConfig source names no header", src.Line, typ)
	}
	return header, nil
}

// setSession records the session plugin's header, as llm-d reads it:
// trimmed, in lower case, def when empty; and what it carries.
func (u *upstream) setSession(p plugin, header, def, key string) error {
	h := strings.ToLower(strings.TrimSpace(header))
	if h == "" {
		h = def
	}
	if !session.ValidHeader(h) {
		return fmt.Errorf("line %d: %s header %q is not an HTTP header name", p.line, p.typ, header)
	}
	u.sessions[p.name] = sessionSource{header: h, key: key}
	return nil
}

// sessionProfileRef is the profileName a session plugin gives.
type sessionProfileRef struct {
	typ, profile string
	line         int
}

// checkSessionProfiles refuses a profileName other than the decode profile
// of a prefill/decode handler: a session keeps to the pod its requests are
// decoded on, the prefill pod is picked anew.
func (u *upstream) checkSessionProfiles() error {
	for _, r := range u.sessionProfiles {
		if u.stages != nil && r.profile == u.stages.decode {
			continue
		}
		return fmt.Errorf("line %d: %s profileName %q is not supported: a session keeps to the pod its requests are decoded on (with prefill/decode disaggregation, the decode profile's); leave profileName out", r.line, r.typ, r.profile)
	}
	return nil
}

// sessionAffinity sets the policy's session affinity from the session
// plugins of the profile: a filter pins the session to its pod; a scorer,
// in the weighted scorer, weighs it (mode prefer), and pins it when the
// policy weighs nothing else or is cache-aware. Every plugin must name one
// header, read alike: the picker reads one session header.
func (u *upstream) sessionAffinity(scorers, filters []string, ws *policy.WeightedScorerConfig, cacheAware bool) error {
	all := append(append([]string(nil), filters...), scorers...)
	if len(all) == 0 {
		return nil
	}
	src := u.sessions[all[0]]
	for _, name := range all[1:] {
		switch s := u.sessions[name]; {
		case s.header != src.header:
			return fmt.Errorf("session plugins %q and %q name different headers (%s, %s): the picker reads one session header; keep one plugin, or give them one header", all[0], name, src.header, s.header)
		case s.key != src.key:
			return fmt.Errorf("session plugins %q and %q read %s differently (the first as a session %s, the second as a session %s): keep one plugin", all[0], name, src.header, src.key, s.key)
		}
	}
	sa := &policy.SessionAffinityConfig{Header: src.header, Mode: policy.SessionPin}
	if src.key == policy.SessionID {
		sa.Key = policy.SessionID
	}
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
