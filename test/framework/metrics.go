package framework

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Sample is one series of a Prometheus page: a counter, gauge or untyped
// value, or a histogram's or summary's count.
type Sample struct {
	Name   string
	Labels map[string]string
	Value  float64
}

// Metrics is a parsed Prometheus text page.
type Metrics []Sample

// ParseMetrics reads a Prometheus text page with the Prometheus parser, so
// label values holding commas, quotes or escapes read as they were written.
func ParseMetrics(r io.Reader) (Metrics, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return nil, fmt.Errorf("parse metrics: %w", err)
	}
	names := make([]string, 0, len(families))
	for name := range families {
		names = append(names, name)
	}
	sort.Strings(names)
	var out Metrics
	for _, name := range names {
		for _, m := range families[name].GetMetric() {
			s := Sample{Name: name, Labels: make(map[string]string, len(m.GetLabel()))}
			for _, l := range m.GetLabel() {
				s.Labels[l.GetName()] = l.GetValue()
			}
			s.Value = value(m)
			out = append(out, s)
		}
	}
	return out, nil
}

// value is a metric's number: a histogram or summary counts its
// observations.
func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	case m.Summary != nil:
		return float64(m.GetSummary().GetSampleCount())
	default:
		return m.GetUntyped().GetValue()
	}
}

// ScrapeMetrics GETs url (with header, for a bearer token say) and parses
// the page.
func ScrapeMetrics(ctx context.Context, url string, header http.Header) (Metrics, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	c := http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return ParseMetrics(resp.Body)
}

// matches reports whether s carries every pair of match ("key", "value",
// ...).
func (s *Sample) matches(match []string) bool {
	for i := 0; i+1 < len(match); i += 2 {
		if s.Labels[match[i]] != match[i+1] {
			return false
		}
	}
	return true
}

// Sum adds the samples of name whose labels include every pair of match
// ("key", "value", ...).
func (ms Metrics) Sum(name string, match ...string) float64 {
	var sum float64
	for i := range ms {
		if ms[i].Name == name && ms[i].matches(match) {
			sum += ms[i].Value
		}
	}
	return sum
}

// Has reports whether a sample of name carries every pair of match.
func (ms Metrics) Has(name string, match ...string) bool {
	for i := range ms {
		if ms[i].Name == name && ms[i].matches(match) {
			return true
		}
	}
	return false
}

// SumBy adds the samples of name by the value of label key.
func (ms Metrics) SumBy(name, key string) map[string]float64 {
	out := map[string]float64{}
	for i := range ms {
		if ms[i].Name == name {
			out[ms[i].Labels[key]] += ms[i].Value
		}
	}
	return out
}
