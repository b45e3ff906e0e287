package extproc

import (
	"math"
	"strings"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/policy"
	"github.com/inferpick/inferpick/picker/registry"
)

// predictEnv is two workers, the fast one prefilling a prompt token in a
// millisecond and the slow one in four, both producing an output token
// every 20 ms, and a least-load policy that predicts latencies, on a fake
// clock the test moves as the servers would take.
type predictEnv struct {
	*env
	clk      *clocktesting.FakePassiveClock
	perToken map[string]time.Duration
}

const predictTPOT = 20 * time.Millisecond

func newPredictEnv(t *testing.T, slo policy.SLOConfig) *predictEnv {
	t.Helper()
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	e := newEnv(t, twoWorkers, func(o *Options) { o.Clock = clk })
	pol, err := policy.Build(policy.Config{Name: policy.LeastLoad, SLO: &slo}, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	e.server.usePicker(pol)
	return &predictEnv{env: e, clk: clk, perToken: map[string]time.Duration{twoWorkers[0]: time.Millisecond, twoWorkers[1]: 4 * time.Millisecond}}
}

// begin sends a streamed chat of about tokens prompt tokens and returns
// its stream and the primary it was routed to.
func (e *predictEnv) begin(tokens int, headers ...string) (*session, string) {
	body := chatBody("m", strings.Repeat("a", 4*tokens))
	s := e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, headers...)
	s.requestBody(body, true)
	primary, _, _ := strings.Cut(s.routed(true).dest, ",")
	return s, primary
}

// serve answers a request begun on dest as its server would: the first
// token after its prompt's prefill, then ten more.
func (e *predictEnv) serve(s *session, dest string, tokens int) {
	e.clk.SetTime(e.clk.Now().Add(time.Duration(tokens) * e.perToken[dest]))
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	s.responseBody(sse("a"), false)
	s.recv()
	e.clk.SetTime(e.clk.Now().Add(10 * predictTPOT))
	s.responseBody(`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":11}}`+"\n\n"+sseDone, true)
	s.recv()
}

// violations returns request_slo_violation_total of a type.
func (e *predictEnv) violations(typ string) float64 {
	e.t.Helper()
	families, err := e.metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0.0
	for _, f := range families {
		if f.GetName() != "inference_objective_request_slo_violation_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "type" && l.GetValue() == typ {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// stream answers a request begun on s with a streamed response of n
// events of chunk, predictTPOT apart, then end, at once.
func (e *predictEnv) stream(s *session, n int, chunk, end string) {
	s.responseHeaders(200, "text/event-stream", false, "")
	s.recv()
	for i := range n {
		if i > 0 {
			e.clk.SetTime(e.clk.Now().Add(predictTPOT))
		}
		s.responseBody(chunk, false)
		s.recv()
	}
	s.responseBody(end, true)
	s.recv()
}

// histogram returns the sample count and sum of a histogram family.
func (e *predictEnv) histogram(name string) (uint64, float64) {
	e.t.Helper()
	families, err := e.metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var n uint64
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			for _, m := range f.GetMetric() {
				h := m.GetHistogram()
				n, sum = n+h.GetSampleCount(), sum+h.GetSampleSum()
			}
		}
	}
	return n, sum
}

// A picker that predicts latencies learns them from the responses it sees
// through the stream: after 100 streamed requests of 500 to 2,000 prompt
// tokens on both pods, a 1,500-token prompt routed to the slow pod is
// predicted to take about 6 s to its first token there and 20 ms a token
// after it, and the upstream series of observed time per output token and
// of predicted latencies are filled (predictions from the 17th request on,
// once the model has learned from 16).
const trainN = 100

func TestTheLatenciesSeenOnTheStreamsArePredicted(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{})
	for i := range trainN {
		tokens := 500 + i*377%1500
		s, dest := e.begin(tokens)
		e.serve(s, dest, tokens)
	}
	if n, sum := e.histogram("inference_objective_request_tpot_seconds"); n != trainN || math.Abs(sum-trainN*predictTPOT.Seconds()) > 1e-9 {
		t.Errorf("request_tpot_seconds: %d samples summing %.4f s, want %d of 20 ms", n, sum, trainN)
	}
	if n, _ := e.histogram("inference_objective_request_predicted_ttft_seconds"); n != trainN-16 {
		t.Errorf("request_predicted_ttft_seconds: %d samples, want %d", n, trainN-16)
	}

	g := e.worker(twoWorkers[0]).Admit() // least-load then sends the next to the slow pod
	defer g.Release()
	_, sumTTFT := e.histogram("inference_objective_request_predicted_ttft_seconds")
	nTPOT, sumTPOT := e.histogram("inference_objective_request_predicted_tpot_seconds")
	s, slow := e.begin(1500)
	if slow != twoWorkers[1] {
		t.Fatalf("routed to %s, want the idle slow pod %s", slow, twoWorkers[1])
	}
	_, after := e.histogram("inference_objective_request_predicted_ttft_seconds")
	if got := after - sumTTFT; got < 5 || got > 7 {
		t.Errorf("predicted TTFT on the slow pod = %.2f s, want about 6 s", got)
	}
	n, afterTPOT := e.histogram("inference_objective_request_predicted_tpot_seconds")
	if got := afterTPOT - sumTPOT; n <= nTPOT || math.Abs(got-predictTPOT.Seconds()) > 0.005 {
		t.Errorf("predicted TPOT on the slow pod = %.4f s (%d samples before, %d after), want about 0.020 s", got, nTPOT, n)
	}
	e.serve(s, slow, 1500)
}

// A streamed response whose server reports no usage has its time per
// output token taken over the events that carried output: five tokens 20
// ms apart are 20 ms a token.
func TestTheTimePerOutputTokenOfAStreamWithoutUsage(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{})
	s, _ := e.begin(100)
	e.stream(s, 5, sse("a"), sseDone)
	if n, sum := e.histogram("inference_objective_request_tpot_seconds"); n != 1 || math.Abs(sum-predictTPOT.Seconds()) > 1e-9 {
		t.Errorf("request_tpot_seconds: %d samples summing %.4f s, want one of 20 ms", n, sum)
	}
}

// A stream of two choices decoded side by side is not taken for one of
// twice the tokens: no time per output token is recorded for it, where
// one of half the step time would be.
func TestTheTimePerOutputTokenOfSeveralChoicesIsNotRecorded(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{})
	s, _ := e.begin(100)
	e.stream(s, 10, sse("a")+`data: {"choices":[{"index":1,"delta":{"content":"b"}}]}`+"\n\n",
		`data: {"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":20}}`+"\n\n"+sseDone)
	if n, sum := e.histogram("inference_objective_request_tpot_seconds"); n != 0 {
		t.Errorf("request_tpot_seconds: %d samples summing %.4f s, want none for two choices", n, sum)
	}
}

// prefillSpy is a policy that records what a prefill pick was given.
type prefillSpy struct {
	policy.Policy
	latencyLearner
	objectives, prediction bool
}

func (p *prefillSpy) Pick(req *policy.Request, cands []*registry.Worker, n int) ([]*registry.Worker, error) {
	if req.Prefill {
		p.objectives, p.prediction = req.SLO.Set(), req.Predicted != nil
	}
	return p.Policy.Pick(req, cands, n)
}

// The prefill pod of a split request is picked without the request's
// objectives and without writing over its decode pod's prediction: the
// objectives are the decode pod's to meet, and the response's latencies
// are learned against the decode pod, or not at all.
func TestAPrefillPickTakesNeitherObjectivesNorPrediction(t *testing.T) {
	e := disaggEnv(t, 0, policy.Config{Name: policy.LeastLoad, SLO: &policy.SLOConfig{}}, splitPool)
	spy := &prefillSpy{Policy: e.server.picker.(policy.Policy), latencyLearner: e.server.learner}
	e.server.usePicker(spy)
	s, r := e.sendChat(long, policy.TTFTObjectiveHeader, "3000")
	if r.set[policy.PrefillerHeader] != prefill {
		t.Fatalf("routed naming prefiller %q, want %s", r.set[policy.PrefillerHeader], prefill)
	}
	if spy.objectives || spy.prediction {
		t.Errorf("the prefill pick was given the objectives: %v, the prediction: %v; want neither", spy.objectives, spy.prediction)
	}
	s.cancel()
}

// A request that states x-slo-ttft-ms is sent to the pod predicted to meet
// it: with the fast pod busy, least-load alone sends a 1,500-token prompt
// to the idle slow pod (about 6 s to its first token); with a 3 s objective
// it goes to the fast pod (about 1.5 s). The objective counts from the
// request's arrival: one whose body came 2.5 s after its headers has 0.5 s
// left, which no pod is predicted to meet, and goes by load again. A first
// token later than the objective is counted as a violation.
func TestARequestGoesWhereItsObjectiveIsPredictedToBeMet(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{ExploreNegative: new(0.0)})
	for i := range trainN {
		tokens := 500 + i*377%1500
		s, dest := e.begin(tokens)
		e.serve(s, dest, tokens)
	}
	g := e.worker(twoWorkers[0]).Admit()
	defer g.Release()
	send := func(wait time.Duration, headers ...string) (*session, string) {
		body := chatBody("m", strings.Repeat("a", 4*1500))
		s := e.open()
		arrived := make(chan struct{})
		testHookArrived = func() { close(arrived) }
		defer func() { testHookArrived = nil }()
		s.requestHeaders("/v1/chat/completions", len(body), false, nil, headers...)
		<-arrived
		e.clk.SetTime(e.clk.Now().Add(wait))
		s.requestBody(body, true)
		primary, _, _ := strings.Cut(s.routed(true).dest, ",")
		return s, primary
	}
	s, dest := send(0)
	if dest != twoWorkers[1] {
		t.Errorf("without an objective routed to %s, want the idle slow pod %s", dest, twoWorkers[1])
	}
	e.serve(s, dest, 1500)
	s, dest = send(0, policy.TTFTObjectiveHeader, "3000")
	if dest != twoWorkers[0] {
		t.Errorf("with a 3 s objective routed to %s, want the fast pod %s", dest, twoWorkers[0])
	}
	e.serve(s, dest, 1500)
	s, dest = send(2500*time.Millisecond, policy.TTFTObjectiveHeader, "3000")
	if dest != twoWorkers[1] {
		t.Errorf("with 0.5 s of a 3 s objective left routed to %s, want the idle slow pod %s (no pod meets it)", dest, twoWorkers[1])
	}
	e.serve(s, dest, 1500)
	if got := e.violations("ttft"); got != 1 {
		t.Errorf("request_slo_violation_total{type=ttft} = %v, want 1 (the request that waited)", got)
	}
}

// A request that states x-slo-tpot-ms holds it on its pod while it is in
// flight, whichever way it ends: a completed response, a cancelled stream,
// a fallback that served it instead (where it moves with the load).
func TestATPOTObjectiveIsHeldWhileTheRequestIsInFlight(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{})
	least := func() [2]time.Duration {
		return [2]time.Duration{e.worker(twoWorkers[0]).LeastTPOTObjective(), e.worker(twoWorkers[1]).LeastTPOTObjective()}
	}
	on := func(addr string, d time.Duration) [2]time.Duration {
		var want [2]time.Duration
		if addr == twoWorkers[0] {
			want[0] = d
		} else {
			want[1] = d
		}
		return want
	}
	// Completed.
	s, dest := e.begin(100, policy.TPOTObjectiveHeader, "40")
	if got := least(); got != on(dest, 40*time.Millisecond) {
		t.Errorf("in flight on %s: least TPOT objectives %v", dest, got)
	}
	e.serve(s, dest, 100)
	if got := least(); got != [2]time.Duration{} {
		t.Errorf("after the response: least TPOT objectives %v, want none", got)
	}
	// Cancelled.
	s, _ = e.begin(100, policy.TPOTObjectiveHeader, "40")
	s.cancel()
	eventually(t, "the cancelled request's objective released", func() bool { return least() == [2]time.Duration{} })
	// Served by the fallback.
	body := chatBody("m", strings.Repeat("a", 400))
	s = e.open()
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, policy.TPOTObjectiveHeader, "40")
	s.requestBody(body, true)
	primary, fallback, _ := strings.Cut(s.routed(true).dest, ",")
	if fallback == "" {
		t.Fatalf("routed to %q, want a fallback listed", primary)
	}
	s.responseHeaders(200, "text/event-stream", false, fallback)
	s.recv()
	if got := least(); got != on(fallback, 40*time.Millisecond) {
		t.Errorf("served by the fallback %s: least TPOT objectives %v", fallback, got)
	}
	s.responseBody(sse("a")+sseDone, true)
	s.recv()
	if got := least(); got != [2]time.Duration{} {
		t.Errorf("after the fallback's response: least TPOT objectives %v, want none", got)
	}
}

// With wholeResponse (upstream's predictor without streamingMode), replies
// sent whole teach the picker their time, routing to end of response: after
// 100 JSON replies that took a prompt token's prefill and 200 ms more, a
// 1,500-token prompt on the slow pod is predicted at about 6.2 s, and a
// reply later than the x-slo-ttft-ms it stated is counted as a miss.
func TestAWholeResponseIsLearnedFromRepliesSentWhole(t *testing.T) {
	e := newPredictEnv(t, policy.SLOConfig{WholeResponse: true})
	reply := func(s *session, dest string, tokens int) {
		e.clk.SetTime(e.clk.Now().Add(time.Duration(tokens)*e.perToken[dest] + 200*time.Millisecond))
		s.responseHeaders(200, "application/json", false, "")
		s.recv()
		s.responseBody(`{"choices":[{"index":0,"message":{"content":"a"}}],"usage":{"prompt_tokens":1,"completion_tokens":11}}`, true)
		s.recv()
	}
	for i := range trainN {
		tokens := 500 + i*377%1500
		s, dest := e.begin(tokens)
		reply(s, dest, tokens)
	}
	g := e.worker(twoWorkers[0]).Admit() // least-load then sends the next to the slow pod
	defer g.Release()
	_, before := e.histogram("inference_objective_request_predicted_ttft_seconds")
	s, dest := e.begin(1500, policy.TTFTObjectiveHeader, "1000")
	if dest != twoWorkers[1] {
		t.Fatalf("routed to %s, want the idle slow pod %s", dest, twoWorkers[1])
	}
	if _, after := e.histogram("inference_objective_request_predicted_ttft_seconds"); after-before < 5.2 || after-before > 7.2 {
		t.Errorf("predicted whole response on the slow pod = %.2f s, want about 6.2 s", after-before)
	}
	reply(s, dest, 1500)
	if got := e.violations("ttft"); got != 1 {
		t.Errorf("request_slo_violation_total{type=ttft} = %v, want 1", got)
	}
}
