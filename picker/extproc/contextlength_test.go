package extproc

import (
	"strings"
	"testing"

	"github.com/inferpick/inferpick/picker/policy"
)

// A request the policy's context-length filter leaves no pod for is
// answered at once: 400 for a prompt longer than every pod's range, as a
// model server answers a prompt past its context, 503 for one the pool's
// ranges leave a gap for; each reply gives the prompt's estimated tokens.
func TestAPromptNoContextRangeHoldsIsRefused(t *testing.T) {
	for name, tc := range map[string]struct {
		err    error
		status int
		says   string
	}{
		"longer than every range": {err: policy.ErrPromptTooLong, status: 400, says: "longer than every endpoint of the pool takes"},
		"in a gap of the ranges":  {err: policy.ErrContextLength, status: 503, says: "No ready endpoint of the pool takes a prompt of about"},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, twoWorkers)
			e.picker.err = tc.err
			s := e.open()
			body := chatBody("m", strings.Repeat("long context ", 4000))
			s.requestHeaders("/v1/chat/completions", len(body), false, nil)
			s.requestBody(body, true)
			code, msg := s.immediateReply()
			if code != tc.status || !strings.Contains(msg, tc.says) || !strings.Contains(msg, "about 130") {
				t.Errorf("reply %d %q, want %d saying %q and the prompt's tokens (about 130xx)", code, msg, tc.status, tc.says)
			}
			if p, d := totalLoad(e.reg.Workers()...); p+d != 0 {
				t.Errorf("load %d after the refusal, want 0", p+d)
			}
		})
	}
}
