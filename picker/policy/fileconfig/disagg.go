package fileconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// llm-d's plugins of encode/prefill/decode disaggregation. The profile
// handlers run a decode profile and, when their deciders say so, a prefill
// profile and (disagg-profile-handler) an encode profile;
// pd-profile-handler is the older of the two (llm-d v0.3 to v0.7,
// deprecated since), disagg-profile-handler the newer (v0.7 on).
const (
	encodeFilter   = "encode-filter"
	mmDecider      = "always-disagg-multimodal-decider"
	pdHandler      = "pd-profile-handler"
	disaggHandler  = "disagg-profile-handler"
	prefixDecider  = "prefix-based-pd-decider"
	alwaysDecider  = "always-disagg-pd-decider"
	prefillFilter  = "prefill-filter"
	decodeFilter   = "decode-filter"
	prefillHeaders = "prefill-header-handler"
	disaggHeaders  = "disagg-headers-handler"
)

// stages is what a P/D profile handler asks for: the names of its profiles
// and what decides whether a request is prefilled apart.
type stages struct {
	typ, name string
	line      int
	// decode, prefill and encode name the handler's profiles.
	decode, prefill, encode string
	// decider names the plugin that decides on the prefill stage, ""
	// when none is named; deciderLine is the line naming it.
	decider     string
	deciderLine int
	// encodeDecider names the plugin that decides on the encode stage,
	// "" when none is named; encodeDeciderLine is the line naming it.
	encodeDecider     string
	encodeDeciderLine int
	// threshold, when not -1, is the older pd-profile-handler's own rule:
	// the bytes of uncached prompt from which a request is prefilled apart.
	threshold int
	// primaryPort, when not 0, is pd-profile-handler's data-parallel port:
	// the decode pod is reached there through its sidecar, the rank picked
	// named in x-data-parallel-host-port (the policy's dataParallel).
	primaryPort int
}

// decider is what a prefill decider's parameters ask.
type decider struct {
	// always: every request is prefilled apart (always-disagg-pd-decider).
	always bool
	// nonCachedTokens is prefix-based-pd-decider's threshold; 0 never
	// disaggregates.
	nonCachedTokens int
}

// newStages returns a handler's stages with llm-d's default profile names.
func newStages(p plugin) *stages {
	return &stages{typ: p.typ, name: p.name, line: p.line, decode: "decode", prefill: "prefill", encode: "encode", threshold: -1}
}

// setStages records the one P/D profile handler.
func (u *upstream) setStages(s *stages) error {
	if u.stages != nil {
		return fmt.Errorf("line %d: a second prefill/decode profile handler (%s); %q is the first: keep one", s.line, s.typ, u.stages.name)
	}
	u.stages = s
	return nil
}

// readPDHandler reads pd-profile-handler's parameters, in both of the
// generations llm-d gave them: threshold and hashBlockSize (v0.3 to v0.5),
// deciderPluginName (v0.6 on); primaryPort (v0.6 on) is read as
// data-parallel-profile-handler's is.
func (u *upstream) readPDHandler(p plugin) error {
	s := newStages(p)
	var inert []string
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "threshold":
			n, err := wholeNumber(p.typ, k.Value, v)
			if err != nil {
				return err
			}
			s.threshold = n
		case "hashBlockSize", "prefixPluginName", "prefixPluginType":
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s %s must be a single value", v.Line, p.typ, k.Value)
			}
			inert = append(inert, k.Value)
		case "decodeProfile":
			setName(&s.decode, v)
		case "prefillProfile":
			setName(&s.prefill, v)
		case "primaryPort":
			n, err := wholeNumber(p.typ, k.Value, v)
			if err != nil {
				return err
			}
			if err := checkPrimaryPort(v.Line, p.typ, n); err != nil {
				return err
			}
			s.primaryPort = n
		case "deciderPluginName":
			s.decider, s.deciderLine = v.Value, v.Line
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, p.typ, k.Value)
		}
	}
	if s.threshold >= 0 && s.decider != "" {
		return fmt.Errorf("line %d: %s has both threshold (llm-d v0.3 to v0.5) and deciderPluginName (v0.6 on): keep one", p.line, p.typ)
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("%s parameters %s have no effect: the picker measures what the decode pod holds of a prompt on its own prefix index (64-byte blocks)", p.typ, strings.Join(inert, ", ")))
	}
	return u.setStages(s)
}

// readDisaggHandler reads disagg-profile-handler's parameters: profiles and
// deciders, or the flat names llm-d still reads (decodeProfile,
// prefillDeciderPluginName, ...), not both.
func (u *upstream) readDisaggHandler(p plugin) error {
	s := newStages(p)
	nested, flat := 0, 0
	prefillDecider := false // prefillDeciderPluginName was given, which outranks deciderPluginName
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch k.Value {
		case "profiles":
			nested = k.Line
			if err := readStageNames(p.typ, k.Value, v, map[string]*string{"decode": &s.decode, "prefill": &s.prefill, "encode": &s.encode}); err != nil {
				return err
			}
		case "deciders":
			nested = k.Line
			var prefill, encode string
			if err := readStageNames(p.typ, k.Value, v, map[string]*string{"prefill": &prefill, "encode": &encode}); err != nil {
				return err
			}
			if encode != "" {
				s.encodeDecider, s.encodeDeciderLine = encode, lookup(v, "encode").Line
			}
			if prefill != "" {
				s.decider, s.deciderLine = prefill, lookup(v, "prefill").Line
			}
		case "decodeProfile":
			flat = k.Line
			setName(&s.decode, v)
		case "prefillProfile":
			flat = k.Line
			setName(&s.prefill, v)
		case "encodeProfile":
			flat = k.Line
			setName(&s.encode, v)
		case "prefillDeciderPluginName", "deciderPluginName":
			flat = k.Line
			if v.Value != "" && (k.Value == "prefillDeciderPluginName" || !prefillDecider) {
				s.decider, s.deciderLine = v.Value, v.Line
				prefillDecider = k.Value == "prefillDeciderPluginName"
			}
		case "encodeDeciderPluginName":
			flat = k.Line
			if v.Value != "" {
				s.encodeDecider, s.encodeDeciderLine = v.Value, v.Line
			}
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, p.typ, k.Value)
		}
	}
	if nested > 0 && flat > 0 {
		return fmt.Errorf("line %d: %s mixes profiles/deciders with the flat parameters (decodeProfile, prefillDeciderPluginName, ...): use one form, as llm-d requires", max(nested, flat), p.typ)
	}
	return u.setStages(s)
}

// readStageNames reads a mapping of stage names (profiles, deciders).
func readStageNames(typ, field string, m *yaml.Node, into map[string]*string) error {
	if isNull(m) {
		return nil
	}
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("line %d: %s %s must be a mapping", m.Line, typ, field)
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		dst, ok := into[k.Value]
		if !ok {
			return fmt.Errorf("line %d: unknown %s %s field %q", k.Line, typ, field, k.Value)
		}
		setName(dst, v)
	}
	return nil
}

// setName sets a profile's name unless the value is empty, which leaves
// llm-d's default.
func setName(dst *string, v *yaml.Node) {
	if v.Value != "" {
		*dst = v.Value
	}
}

// wholeNumber reads a parameter that must be a whole number ≥ 0.
func wholeNumber(typ, key string, v *yaml.Node) (int, error) {
	n, err := strconv.Atoi(v.Value)
	if v.Kind != yaml.ScalarNode || err != nil || n < 0 {
		return 0, fmt.Errorf("line %d: %s %s %q must be a whole number ≥ 0", v.Line, typ, key, v.Value)
	}
	return n, nil
}

// readPrefixDecider reads prefix-based-pd-decider's nonCachedTokens.
func (u *upstream) readPrefixDecider(p plugin) error {
	d := decider{}
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		if k.Value != "nonCachedTokens" {
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, p.typ, k.Value)
		}
		n, err := wholeNumber(p.typ, k.Value, v)
		if err != nil {
			return err
		}
		d.nonCachedTokens = n
	}
	u.deciders[p.name] = d
	return nil
}

// readHeaderHandler checks a header handler: inferpick names the prefill
// pod in x-prefiller-host-port and the encode pod in x-encoder-hosts-ports
// itself, so the handler only has to name the profiles those pods come
// from, checked once profiles are.
func (u *upstream) readHeaderHandler(p plugin) error {
	for i := 0; p.params != nil && i+1 < len(p.params.Content); i += 2 {
		k, v := p.params.Content[i], p.params.Content[i+1]
		switch {
		case k.Value == "prefillProfile":
			if v.Value != "" {
				u.headerProfiles = append(u.headerProfiles, profileRef{name: v.Value, line: v.Line})
			}
		case k.Value == "encodeProfile" && p.typ == disaggHeaders:
			if v.Value != "" {
				u.headerEncodeProfiles = append(u.headerEncodeProfiles, profileRef{name: v.Value, line: v.Line})
			}
		default:
			return fmt.Errorf("line %d: unknown %s parameter %q", k.Line, p.typ, k.Value)
		}
	}
	return nil
}

// schedProfile is one scheduling profile.
type schedProfile struct {
	name string
	line int
	refs []profileRef
}

// split finds the handler's decode, prefill and encode profiles; prefill
// and encode are nil when there is none. Any other profile is refused.
func (s *stages) split(profs []schedProfile) (decode, prefill, encode *schedProfile, err error) {
	for i := range profs {
		p := &profs[i]
		switch {
		case p.name == s.decode:
			decode = p
		case p.name == s.prefill:
			prefill = p
		case s.typ == disaggHandler && p.name == s.encode:
			encode = p
		case s.typ == disaggHandler:
			return nil, nil, nil, fmt.Errorf("line %d: scheduling profile %q is neither the decode profile (%q), the prefill profile (%q) nor the encode profile (%q) of %s", p.line, p.name, s.decode, s.prefill, s.encode, s.typ)
		default:
			return nil, nil, nil, fmt.Errorf("line %d: scheduling profile %q is neither the decode profile (%q) nor the prefill profile (%q) of %s", p.line, p.name, s.decode, s.prefill, s.typ)
		}
	}
	if decode == nil {
		return nil, nil, nil, fmt.Errorf("line %d: %s has no decode profile: name a scheduling profile %q (or set its decode profile's name)", s.line, s.typ, s.decode)
	}
	return decode, prefill, encode, nil
}

// The stages a profile is of, for checkStageFilters.
const (
	decodeStage = iota
	prefillStage
	encodeStage
)

// checkStageFilters refuses prefill-filter outside a prefill profile,
// decode-filter in a prefill or encode profile, and encode-filter outside
// an encode profile.
func (u *upstream) checkStageFilters(p *schedProfile, stage int) error {
	for _, ref := range p.refs {
		switch typ := u.plugins[ref.name].typ; {
		case typ == prefillFilter && stage != prefillStage:
			return fmt.Errorf("line %d: plugin %q (%s) outside a prefill profile: prefill/decode disaggregation takes %s or %s with a prefill profile of %s beside a decode profile of %s", ref.line, ref.name, typ, disaggHandler, pdHandler, prefillFilter, decodeFilter)
		case typ == decodeFilter && stage == prefillStage:
			return fmt.Errorf("line %d: plugin %q (%s) in the prefill profile: the prefill pod is picked among the pods %s keeps", ref.line, ref.name, typ, prefillFilter)
		case typ == decodeFilter && stage == encodeStage:
			return fmt.Errorf("line %d: plugin %q (%s) in the encode profile: the encode pod is picked among the pods %s keeps", ref.line, ref.name, typ, encodeFilter)
		case typ == encodeFilter && stage != encodeStage:
			return fmt.Errorf("line %d: plugin %q (%s) outside an encode profile: encode disaggregation takes %s with an encode profile of %s and deciders.encode %s", ref.line, ref.name, typ, disaggHandler, encodeFilter, mmDecider)
		}
	}
	return nil
}

// disaggregate sets the policy's disaggregation from the handler, its
// deciders and its profiles, the decode profile already translated.
func (u *upstream) disaggregate(s *stages, decode, prefill, encode *schedProfile) error {
	for _, h := range u.headerProfiles {
		if h.name != s.prefill {
			return fmt.Errorf("line %d: the header handler's prefillProfile %q is not the prefill profile of %s (%q)", h.line, h.name, s.typ, s.prefill)
		}
	}
	for _, h := range u.headerEncodeProfiles {
		if h.name != s.encode {
			return fmt.Errorf("line %d: the header handler's encodeProfile %q is not the encode profile of %s (%q)", h.line, h.name, s.typ, s.encode)
		}
	}
	encodes, err := u.encodeStage(s, encode)
	if err != nil {
		return err
	}
	cfg, err := u.prefillApart(s, decode, prefill)
	if err != nil {
		return err
	}
	if encodes {
		if cfg == nil {
			cfg = &policy.DisaggregationConfig{PrefillPods: policy.PrefillPodsNone}
		}
		cfg.Encode = policy.EncodeMultimodal
		cfg.EncodeLabelFilters, _ = u.stageLabelFilters(encode)
	}
	u.out.Policy.Disaggregation = cfg
	return nil
}

// prefillApart returns the disaggregation the prefill profile and decider
// ask, nil when no request is prefilled apart.
func (u *upstream) prefillApart(s *stages, decode, prefill *schedProfile) (*policy.DisaggregationConfig, error) {
	d, named, err := u.prefillDecider(s)
	if err != nil {
		return nil, err
	}
	if prefill == nil {
		if named {
			u.warn(fmt.Sprintf("%s's decider %q has no effect: there is no scheduling profile %q, so every request is prefilled and decoded on one pod", s.typ, s.decider, s.prefill))
		}
		return nil, nil
	}
	if err := u.checkPrefillProfile(prefill); err != nil {
		return nil, err
	}
	tokens, on := u.minUncached(s, d, named)
	if !on {
		return nil, nil
	}
	u.comparePrefill(decode, prefill)
	cfg := &policy.DisaggregationConfig{MinUncachedTokens: tokens}
	u.prefillStage(prefill, cfg)
	return cfg, nil
}

// encodeStage reports whether multimodal requests are encoded apart: the
// handler's encode decider is always-disagg-multimodal-decider and there is
// an encode profile. The encode pod is the encode pod with room that has
// the fewest requests in flight among those the profile's label filters
// (by-label, by-label-selector) keep, as llm-d's encode profile of
// encode-filter and those filters picks one of them; what else the profile
// lists is reported to have no effect.
func (u *upstream) encodeStage(s *stages, encode *schedProfile) (bool, error) {
	named := s.encodeDecider != ""
	if named {
		p, ok := u.plugins[s.encodeDecider]
		if !ok {
			return false, fmt.Errorf("line %d: %s's encode decider %q names no plugin in plugins", s.encodeDeciderLine, s.typ, s.encodeDecider)
		}
		if p.typ != mmDecider {
			return false, fmt.Errorf("line %d: %s's encode decider %q (%s) is not one: use %s", s.encodeDeciderLine, s.typ, s.encodeDecider, p.typ, mmDecider)
		}
	}
	switch {
	case encode == nil && named:
		u.warn(fmt.Sprintf("%s's encode decider %q has no effect: there is no scheduling profile %q, so a request's media is encoded on the pod that prefills it", s.typ, s.encodeDecider, s.encode))
		return false, nil
	case encode == nil:
		return false, nil
	case !named:
		u.warn(fmt.Sprintf("the scheduling profile %q has no effect: %s names no encode decider, so llm-d encodes every request's media on the pod that prefills it", s.encode, s.typ))
		return false, nil
	}
	filtered := false
	var inert []string
	for _, ref := range encode.refs {
		// checkStageFilters has refused the other stages' filters here.
		switch typ := u.plugins[ref.name].typ; {
		case typ == encodeFilter:
			filtered = true
		case !weighsNothing(typ):
			inert = append(inert, fmt.Sprintf("%q (%s)", ref.name, typ))
		}
	}
	if !filtered {
		return false, fmt.Errorf("line %d: the encode profile %q has no %s: inferpick picks the encode pod among the pods labelled %s encode, encode-prefill or encode-prefill-decode, which %s keeps", encode.line, encode.name, encodeFilter, policy.RoleLabel, encodeFilter)
	}
	if len(inert) > 0 {
		u.warn(fmt.Sprintf("the encode profile %q's plugins %s have no effect: the encode pod is the encode pod with room that has the fewest requests in flight", encode.name, strings.Join(inert, ", ")))
	}
	return true, nil
}

// prefillDecider returns the handler's prefill decider, and whether there
// is one. pd-profile-handler without deciderPluginName or threshold takes
// the decider llm-d's versions default to, when plugins has it
// (prefix-based-pd-decider from v0.7, always-disagg-pd-decider in v0.6),
// or else its own threshold of 0 (v0.3 to v0.5): every request apart.
func (u *upstream) prefillDecider(s *stages) (decider, bool, error) {
	if s.decider == "" && s.typ == pdHandler && s.threshold < 0 {
		for _, name := range []string{prefixDecider, alwaysDecider} {
			if p, ok := u.plugins[name]; ok && p.typ == name {
				s.decider, s.deciderLine = name, s.line
				break
			}
		}
		if s.decider == "" {
			s.threshold = 0
		}
	}
	if s.decider == "" {
		return decider{}, false, nil
	}
	p, ok := u.plugins[s.decider]
	if !ok {
		return decider{}, false, fmt.Errorf("line %d: %s's prefill decider %q names no plugin in plugins", s.deciderLine, s.typ, s.decider)
	}
	switch p.typ {
	case prefixDecider:
		return u.deciders[p.name], true, nil
	case alwaysDecider:
		return decider{always: true}, true, nil
	}
	return decider{}, false, fmt.Errorf("line %d: %s's prefill decider %q (%s) is not one: use %s or %s", s.deciderLine, s.typ, s.decider, p.typ, prefixDecider, alwaysDecider)
}

// minUncached returns the policy's minUncachedTokens, and whether requests
// are prefilled apart at all.
func (u *upstream) minUncached(s *stages, d decider, named bool) (int, bool) {
	switch {
	case named && d.always:
		return 0, true
	case named && d.nonCachedTokens > 0:
		return d.nonCachedTokens, true
	case named:
		u.warn(fmt.Sprintf("%s %q with nonCachedTokens 0 never prefills apart (llm-d v0.7 on; v0.6 took 0 as every request, which is %s): the prefill profile has no effect", prefixDecider, s.decider, alwaysDecider))
		return 0, false
	case s.threshold >= 0:
		// The uncached bytes llm-d compares, as tokens of 4 bytes,
		// rounded up so that no request shorter than it asks is split.
		tokens := (s.threshold + 3) / 4
		if s.threshold%4 != 0 {
			u.warn(fmt.Sprintf("%s threshold %d (bytes of uncached prompt) is taken as minUncachedTokens %d (4 bytes a token, rounded up): a request is prefilled apart from %d uncached bytes on", s.typ, s.threshold, tokens, 4*tokens))
		}
		return tokens, true
	}
	u.warn(fmt.Sprintf("the scheduling profile %q has no effect: %s names no prefill decider, so llm-d prefills every request on its decode pod", s.prefill, s.typ))
	return 0, false
}

// checkPrefillProfile checks that the prefill profile's plugins may be in
// a profile.
func (u *upstream) checkPrefillProfile(p *schedProfile) error {
	for _, ref := range p.refs {
		pl := u.plugins[ref.name]
		if r := known[pl.typ]; r.weight == nil && !r.cacheAware && !r.inProfile {
			return fmt.Errorf("line %d: plugin %q (%s) cannot be in a scheduling profile", ref.line, ref.name, pl.typ)
		}
	}
	return nil
}

// comparePrefill warns when the prefill profile weighs other plugins, or
// the same ones otherwise, than the decode profile: one policy picks both
// pods.
func (u *upstream) comparePrefill(decode, prefill *schedProfile) {
	d, p := u.weighs(decode), u.weighs(prefill)
	if d == p {
		return
	}
	u.warn(fmt.Sprintf("the prefill profile %q weighs %s, the decode profile %q %s: the prefill pod is picked by the same policy as the decode pod, the one the decode profile gives", prefill.name, p, decode.name, d))
}

// weighsNothing reports whether a plugin of type typ adds nothing to what
// a profile weighs: the stage filters, the label filters, the picker, the
// parsers and the reporter (which upstream's samples list in a profile,
// though they pick nothing).
func weighsNothing(typ string) bool {
	switch typ {
	case prefillFilter, decodeFilter, encodeFilter, byLabel, byLabelSelector, maxScorePicker, openAIParser, vllmGRPCParser, attributeReporter:
		return true
	}
	return false
}

// weighs describes what a profile weighs: its plugins but those that
// weigh nothing (weighsNothing), each with its weight, in name order.
func (u *upstream) weighs(p *schedProfile) string {
	w := map[string]float64{}
	for _, ref := range p.refs {
		if weighsNothing(u.plugins[ref.name].typ) {
			continue
		}
		w[ref.name] += ref.weight
	}
	if len(w) == 0 {
		return "nothing"
	}
	names := make([]string, 0, len(w))
	for name := range w {
		names = append(names, name)
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = fmt.Sprintf("%s %s", name, strconv.FormatFloat(w[name], 'g', -1, 64))
	}
	return strings.Join(parts, ", ")
}
