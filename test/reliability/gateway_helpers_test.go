package reliability

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/inferpick/inferpick/test/framework"
	"github.com/inferpick/inferpick/test/gateway"
)

// gw is the Envoy stand-in serving on a loopback port, with a recorder.
type gw struct {
	*framework.Gateway
	client *http.Client
}

// startGateway runs a gateway in front of the picker at pickerAddr. The
// message timeout is off (Envoy's behaviour in full-duplex mode) unless an
// option sets it.
func startGateway(t testing.TB, pickerAddr string, opts ...gateway.Option) *gw {
	t.Helper()
	g := framework.StartGatewayT(t, pickerAddr, opts...)
	return &gw{Gateway: g, client: g.Client}
}

// PostOK posts body to path through the gateway with header and fails the
// test unless the answer is 200.
func (g *gw) PostOK(t testing.TB, path string, body []byte, header http.Header) {
	t.Helper()
	resp, err := g.Post(t.Context(), path, body, header)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, out)
	}
}

// openLongStreams starts n streamed completions of up to 4,000 tokens
// through g, prompts of words random words from seed, each read until it
// ends or ctx is cancelled; Wait on the result returns when all have.
func openLongStreams(ctx context.Context, g *gw, n, words int, seed uint64) *sync.WaitGroup {
	var wg sync.WaitGroup
	r := rand.New(rand.NewPCG(seed, seed))
	for range n {
		body := completion(randomPrompt(r, words), 4000, true)
		wg.Go(func() {
			if resp, err := g.Post(ctx, "/v1/completions", body, nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	return &wg
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
