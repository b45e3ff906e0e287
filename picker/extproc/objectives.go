package extproc

import (
	"errors"
	"math"
	"strconv"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/inferpick/inferpick/picker/policy"
)

// maxObjective bounds a latency objective: a request whose header states
// more is refused, since no response is awaited that long and a duration
// past it would only overflow a deadline.
const maxObjective = 24 * time.Hour

// errObjective reports a latency objective header whose value is not a
// number of milliseconds the picker takes.
var errObjective = errors.New("must be a number of milliseconds from 0 up to 86400000 (24h)")

// parseObjective reads a latency objective header's value: milliseconds
// as a decimal (or any form strconv.ParseFloat reads), as the upstream
// picker's latency plugins read them. An empty value, or 0, states no
// objective; a positive value under a nanosecond states one nanosecond.
// A value that does not parse, is negative, not finite or over
// maxObjective is errObjective.
func parseObjective[T string | []byte](v T) (time.Duration, error) {
	if len(v) == 0 {
		return 0, nil
	}
	ms, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(ms) || ms < 0 || ms > float64(maxObjective/time.Millisecond) {
		return 0, errObjective
	}
	d := time.Duration(ms * float64(time.Millisecond))
	if d == 0 && ms > 0 {
		d = 1
	}
	return d, nil
}

// objectives are the latency objectives a request's headers state, and
// the header whose value the picker cannot read, if any. A header given
// more than once counts by its last value, as the picker's other request
// headers do.
type objectives struct {
	slo policy.SLO
	// bad holds the unreadable value of each header (ttft, tpot), "" for
	// one read or absent.
	bad [2]string
	// ttftStated: x-slo-ttft-ms came with a value read, 0 included, which
	// has a deadline (its arrival) though it states no objective.
	ttftStated bool
}

// read reads one objective header's value into o.
func (o *objectives) read(h *corev3.HeaderValue) {
	i, d := 0, &o.slo.TTFT
	if h.GetKey() == policy.TPOTObjectiveHeader {
		i, d = 1, &o.slo.TPOT
	}
	var err error
	raw := h.GetRawValue()
	if len(raw) > 0 {
		*d, err = parseObjective(raw)
	} else {
		*d, err = parseObjective(h.GetValue())
	}
	o.bad[i] = ""
	if err != nil {
		o.bad[i] = textValue(h)
	}
	if i == 0 {
		o.ttftStated = err == nil && (len(raw) > 0 || h.GetValue() != "")
	}
}

// refusal is the reason a request with an unreadable objective header is
// refused (400), naming the header and its value; "" when there is none.
func (o *objectives) refusal() string {
	for i, name := range [2]string{policy.TTFTObjectiveHeader, policy.TPOTObjectiveHeader} {
		if v := o.bad[i]; v != "" {
			return "header " + name + " " + strconv.Quote(clip(v)) + " " + errObjective.Error()
		}
	}
	return ""
}
