package reliability

import (
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// gw is the Envoy stand-in serving on a loopback port, with a recorder.
type gw struct {
	*framework.Gateway
	client *http.Client
}

// timedRecord is a gateway record with the wall time the request arrived.
type timedRecord = framework.Record //nolint:unused // kept for tests written against the old harness

// startGateway runs a gateway in front of the picker at pickerAddr. The
// message timeout is off (Envoy's behaviour in full-duplex mode) unless an
// option sets it.
func startGateway(t testing.TB, pickerAddr string, opts ...gateway.Option) *gw {
	t.Helper()
	g := framework.StartGatewayT(t, pickerAddr, opts...)
	return &gw{Gateway: g, client: g.Client}
}

// completion builds a completion request body.
func completion(prompt string, maxTokens int, stream bool) []byte {
	return framework.Completion("sim-model", prompt, maxTokens, stream)
}

// randomPrompt returns a prompt with no prefix in common with others.
func randomPrompt(r *rand.Rand, words int) string {
	var b strings.Builder
	for i := range words {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.FormatUint(r.Uint64(), 36))
	}
	return b.String()
}
