package scrape

import (
	"errors"
	"fmt"
	"strings"
)

// ParseSeries reads a series as the upstream endpoint picker's metric
// flags write it, a PromQL selector with equality matchers only:
//
//	vllm:num_requests_waiting
//	nv_trt_llm_request_metrics{request_type="waiting"}
//	nv_trt_llm_request_metrics{request_type=waiting}
//
// Label values may be quoted or bare. Quotes around the whole spec, which
// charts render into flag values, are dropped. An empty spec returns the
// zero Series, which names nothing.
func ParseSeries(spec string) (Series, error) {
	s := strings.TrimSpace(spec)
	if n := len(s); n >= 2 && (s[0] == '"' || s[0] == '\'') && s[n-1] == s[0] {
		s = strings.TrimSpace(s[1 : n-1])
	}
	if s == "" {
		return Series{}, nil
	}
	p := specParser{s: s}
	out, err := p.series()
	if err != nil {
		return Series{}, fmt.Errorf("metric spec %q: %w", spec, err)
	}
	return out, nil
}

type specParser struct {
	s string
	i int
}

func (p *specParser) blank() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// ident reads a metric (label false) or label name.
func (p *specParser) ident(label bool) string {
	start := p.i
	if p.i < len(p.s) && isNameStart(p.s[p.i], label) {
		class := uint8(metricByte)
		if label {
			class = labelByte
		}
		p.i++
		for p.i < len(p.s) && charClass[p.s[p.i]]&class != 0 {
			p.i++
		}
	}
	return p.s[start:p.i]
}

func (p *specParser) series() (Series, error) {
	var out Series
	if out.Name = p.ident(false); out.Name == "" {
		return Series{}, errors.New("no metric name")
	}
	if len(out.Name) > maxName {
		return Series{}, fmt.Errorf("metric name longer than %d bytes", maxName)
	}
	p.blank()
	if p.i == len(p.s) {
		return out, nil
	}
	if p.s[p.i] != '{' {
		return Series{}, fmt.Errorf("unexpected %q after the metric name", p.s[p.i:])
	}
	p.i++
	for {
		p.blank()
		if p.i < len(p.s) && p.s[p.i] == '}' {
			p.i++
			break
		}
		l, err := p.match()
		if err != nil {
			return Series{}, err
		}
		for _, prev := range out.Labels {
			if prev.Name == l.Name {
				return Series{}, fmt.Errorf("label %s given twice", l.Name)
			}
		}
		out.Labels = append(out.Labels, l)
		p.blank()
		switch {
		case p.i == len(p.s):
			return Series{}, errors.New("no closing brace")
		case p.s[p.i] == ',':
			p.i++
		case p.s[p.i] != '}':
			return Series{}, fmt.Errorf("unexpected %q in the label matchers", p.s[p.i:])
		}
	}
	p.blank()
	if p.i != len(p.s) {
		return Series{}, fmt.Errorf("unexpected %q after the label matchers", p.s[p.i:])
	}
	return out, nil
}

// match reads label="value" or label=value.
func (p *specParser) match() (LabelMatch, error) {
	var l LabelMatch
	if l.Name = p.ident(true); l.Name == "" {
		return l, errors.New("no label name in the label matchers")
	}
	p.blank()
	if p.i == len(p.s) || p.s[p.i] != '=' || p.i+1 < len(p.s) && p.s[p.i+1] == '~' {
		return l, fmt.Errorf("label %s: only equality matchers (label=\"value\") are supported", l.Name)
	}
	p.i++
	p.blank()
	if p.i < len(p.s) && p.s[p.i] == '"' {
		v, err := p.quoted()
		if err != nil {
			return l, fmt.Errorf("label %s: %w", l.Name, err)
		}
		l.Value = v
		return l, nil
	}
	start := p.i
	for p.i < len(p.s) && !strings.ContainsRune("\",} \t", rune(p.s[p.i])) {
		p.i++
	}
	if p.i == start {
		return l, fmt.Errorf("label %s: no value", l.Name)
	}
	l.Value = p.s[start:p.i]
	return l, nil
}

// quoted reads a double-quoted value with \\, \" and \n escapes.
func (p *specParser) quoted() (string, error) {
	var b strings.Builder
	for p.i++; p.i < len(p.s); p.i++ {
		switch c := p.s[p.i]; c {
		case '"':
			p.i++
			return b.String(), nil
		case '\\':
			p.i++
			if p.i == len(p.s) {
				return "", errors.New("unterminated value")
			}
			switch p.s[p.i] {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(p.s[p.i])
			default:
				return "", fmt.Errorf("unknown escape \\%c", p.s[p.i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated value")
}
