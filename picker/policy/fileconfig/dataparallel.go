package fileconfig

import (
	"fmt"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/portnum"
)

// dpHandler is llm-d's data-parallel profile handler: its one profile
// picks a (pod, rank port) endpoint, and the request goes to the pod's
// primaryPort, the rank named to the pod's sidecar in
// x-data-parallel-host-port: the policy's dataParallel.
const dpHandler = "data-parallel-profile-handler"

// defaultPrimaryPort is the handler's primaryPort when its parameters
// omit it, as llm-d's factory sets it.
const defaultPrimaryPort = 8000

// dataParallel is what the data-parallel handler asks.
type dataParallel struct {
	name        string
	line        int
	primaryPort int
}

// readDPHandler reads the data-parallel handler's primaryPort: 1 to 65535,
// or 0 to route to each rank's port itself.
func (u *upstream) readDPHandler(p plugin) error {
	if u.dataParallel != nil {
		return fmt.Errorf("line %d: a second %s; %q is the first: keep one", p.line, dpHandler, u.dataParallel.name)
	}
	dp := &dataParallel{name: p.name, line: p.line, primaryPort: defaultPrimaryPort}
	if hasParams(p) {
		for i := 0; i+1 < len(p.params.Content); i += 2 {
			k, v := p.params.Content[i], p.params.Content[i+1]
			if k.Value != "primaryPort" {
				// llm-d's factory ignores what it does not read.
				u.warn(fmt.Sprintf("%s parameter %s has no effect: the handler takes primaryPort only", dpHandler, k.Value))
				continue
			}
			n, err := integer(p.typ, k.Value, v)
			if err != nil {
				return err
			}
			if err := checkPrimaryPort(v.Line, dpHandler, n); err != nil {
				return err
			}
			dp.primaryPort = n
		}
	}
	u.dataParallel = dp
	return nil
}

// checkPrimaryPort checks the primaryPort n of a handler of type typ,
// given at line: a port, or 0.
func checkPrimaryPort(line int, typ string, n int) error {
	if n == 0 || portnum.Valid(n) {
		return nil
	}
	return fmt.Errorf("line %d: %s primaryPort %d must be a port %s, or 0", line, typ, n, portnum.Range)
}

// checkDataParallel checks the handler against the profiles: it runs one
// profile, never beside a prefill/decode handler (llm-d runs one profile
// handler).
func (u *upstream) checkDataParallel(profs []schedProfile) error {
	dp := u.dataParallel
	if dp == nil {
		return nil
	}
	if u.stages != nil {
		return fmt.Errorf("line %d: %s beside the prefill/decode profile handler %q: llm-d runs one profile handler; keep one", dp.line, dpHandler, u.stages.name)
	}
	if len(profs) > 1 {
		return fmt.Errorf("line %d: a second scheduling profile (%d in all): %s runs one profile", profs[1].line, len(profs), dpHandler)
	}
	return nil
}

// applyDataParallel turns dataParallel on for the data-parallel handler,
// or for pd-profile-handler's non-zero primaryPort (llm-d v0.6 on), which
// sends the decode pod's request through its sidecar the same way, once
// the profile is translated.
func (u *upstream) applyDataParallel() {
	if s := u.stages; s != nil && s.primaryPort != 0 {
		u.setDataParallel(s.typ+" primaryPort", "primaryPort", s.primaryPort)
		return
	}
	dp := u.dataParallel
	if dp == nil {
		return
	}
	if dp.primaryPort == 0 {
		u.warn(fmt.Sprintf("%s primaryPort 0 routes each request to the port of the rank picked for it, with no x-data-parallel-host-port: the pool's targetPorts reach each rank", dpHandler))
		return
	}
	u.setDataParallel(dpHandler, "the handler", dp.primaryPort)
}

// setDataParallel sets the policy's dataParallel on port, for what asked
// it (a handler, or a handler's parameter, which left out routes to each
// rank's port).
func (u *upstream) setDataParallel(what, leftOut string, port int) {
	u.out.Policy.DataParallel = &policy.DataParallelConfig{PrimaryPort: port}
	u.warn(fmt.Sprintf("%s is deprecated in llm-d: Istio 1.28.1 and later route to each rank's port directly, and so does the picker with the ranks' ports in the pool's targetPorts and %s left out; until then each request goes to its pod's port %d, the rank named in x-data-parallel-host-port", what, leftOut, port))
	if u.out.MaxEndpoints > 1 {
		u.warn(fmt.Sprintf("max-score-picker maxNumOfEndpoints %d lists no fallbacks beside %s: x-data-parallel-host-port names the first endpoint's rank alone, which another pod's sidecar would refuse", u.out.MaxEndpoints, what))
	}
}
