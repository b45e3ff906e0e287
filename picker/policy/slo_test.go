package policy

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/inferpick/inferpick/picker/registry"
)

// TestTheFitLearnsALinearLatency: fed latencies that are a linear function
// of the features, the least-squares fit predicts new ones within 1%.
func TestTheFitLearnsALinearLatency(t *testing.T) {
	truth := features{0.02, 0.5, 0.1, 0.01, 0.05}
	rng := rand.New(rand.NewPCG(3, 4))
	sample := func() features {
		return features{1, rng.Float64() * 8, float64(rng.IntN(6)), float64(rng.IntN(32)), rng.Float64()}
	}
	f := newFit()
	for range 400 {
		x := sample()
		f.add(&x, dot(&truth, &x))
	}
	for range 20 {
		x := sample()
		want, got := dot(&truth, &x), dot(&f.theta, &x)
		if math.Abs(got-want) > 0.01*want {
			t.Fatalf("prediction for %v = %.4f s, want %.4f s within 1%%", x, got, want)
		}
	}
}

// sloPool is two pods and a least-load policy with objectives whose
// predictor has learned that each prompt token takes a millisecond to
// prefill on pod 0 and four on pod 1, and each output token 20 ms on pod 0
// and 80 on pod 1: requests of 500 to 4,000 tokens, picked and observed as
// served.
func sloPool(t *testing.T, slo SLOConfig) (Policy, []*registry.Worker) {
	t.Helper()
	reg, ws := pool(2)
	p := build(t, Config{Name: LeastLoad, SLO: &slo}, reg, nil)
	perToken := map[*registry.Worker]time.Duration{ws[0]: time.Millisecond, ws[1]: 4 * time.Millisecond}
	var pr Prediction
	for i := range 200 {
		tokens := 500 + i*350%3500
		if _, err := p.Pick(&Request{Model: "m", Tokens: tokens, Predicted: &pr}, ws, 1); err != nil || !pr.Made() {
			t.Fatalf("training pick %d: %v (prediction made: %v)", i, err, pr.Made())
		}
		p.(LatencyObserver).ObserveTTFT(&pr, time.Duration(tokens)*perToken[pr.worker])
		p.(LatencyObserver).ObserveTPOT(&pr, 20*perToken[pr.worker]/time.Millisecond*time.Millisecond)
	}
	return p, ws
}

// TestARequestWithAnObjectiveGoesWhereItIsPredictedToMeetIt: pod 0 is busy
// and fast, pod 1 idle and slow. Least-load sends a 2,000-token prompt to
// pod 1, where its first token takes about 8 s; with an objective of 4 s it
// goes to pod 0, predicted at about 2 s. With an objective neither pod is
// predicted to meet, the pick is least-load's again.
func TestARequestWithAnObjectiveGoesWhereItIsPredictedToMeetIt(t *testing.T) {
	p, ws := sloPool(t, SLOConfig{ExploreNegative: new(0.0)})
	admit(t, ws[0], 2)
	var pr Prediction
	pick := func(objective time.Duration) *registry.Worker {
		got, err := p.Pick(&Request{Model: "m", Tokens: 2000, SLO: SLO{TTFT: objective}, Predicted: &pr}, ws, 1)
		if err != nil {
			t.Fatalf("Pick with objective %v: %v", objective, err)
		}
		return got[0]
	}
	if got := pick(0); got != ws[1] {
		t.Errorf("without an objective the pick went to %s, want pod-1 (least loaded)", got.Address())
	}
	if pr.TTFT < 6*time.Second || pr.TTFT > 10*time.Second {
		t.Errorf("predicted TTFT on pod-1 = %v, want about 8s", pr.TTFT)
	}
	if got := pick(4 * time.Second); got != ws[0] {
		t.Errorf("with a 4s objective the pick went to %s, want pod-0 (predicted to meet it)", got.Address())
	}
	if pr.TTFT < 1500*time.Millisecond || pr.TTFT > 2500*time.Millisecond {
		t.Errorf("predicted TTFT on pod-0 = %v, want about 2s", pr.TTFT)
	}
	if got := pick(100 * time.Millisecond); got != ws[1] {
		t.Errorf("with an objective no pod meets the pick went to %s, want pod-1 (least loaded)", got.Address())
	}
}

// TestTheBufferFactorLoosensTheTPOTObjective: a 50 ms TPOT objective is
// met on pod 0 (20 ms) alone; with bufferFactor 2, as upstream's
// sloBufferFactor, it is 100 ms, met on pod 1 (80 ms) too, and least-load
// picks the idle pod 1 over the busy pod 0. The TTFT objective is held as
// stated.
func TestTheBufferFactorLoosensTheTPOTObjective(t *testing.T) {
	for name, tc := range map[string]struct {
		factor float64
		slo    SLO
		want   int
	}{
		"tpot, factor 1": {1, SLO{TPOT: 50 * time.Millisecond}, 0},
		"tpot, factor 2": {2, SLO{TPOT: 50 * time.Millisecond}, 1},
		"ttft, factor 2": {2, SLO{TTFT: 4 * time.Second}, 0},
	} {
		t.Run(name, func(t *testing.T) {
			p, ws := sloPool(t, SLOConfig{BufferFactor: tc.factor, ExploreNegative: new(0.0)})
			admit(t, ws[0], 2)
			req := &Request{Model: "m", Tokens: 2000, SLO: tc.slo}
			if got, err := p.Pick(req, ws, 1); err != nil || got[0] != ws[tc.want] {
				t.Errorf("Pick = %v, %v; want pod-%d", got, err, tc.want)
			}
		})
	}
}

// TestExploringSendsAPickAmongThePodsThatMiss: with exploreNegative 1,
// every pick goes among the pods predicted to miss the objective.
func TestExploringSendsAPickAmongThePodsThatMiss(t *testing.T) {
	p, ws := sloPool(t, SLOConfig{ExploreNegative: new(1.0)})
	admit(t, ws[1], 2) // least-load alone would pick pod 0
	got, err := p.Pick(&Request{Model: "m", Tokens: 2000, SLO: SLO{TTFT: 4 * time.Second}}, ws, 1)
	if err != nil || got[0] != ws[1] {
		t.Fatalf("Pick = %v, %v; want pod-1, the pod predicted to miss", got, err)
	}
}

// TestASheddableRequestNoPodMeetsIsRefused: with admission on, a sheddable
// request whose objective every busy pod is predicted to miss is refused;
// one that is not sheddable is served, and so is a sheddable one while a
// pod is idle.
func TestASheddableRequestNoPodMeetsIsRefused(t *testing.T) {
	p, ws := sloPool(t, SLOConfig{Admission: true})
	admit(t, ws[1], 1)
	req := func(sheddable bool) *Request {
		return &Request{Model: "m", Tokens: 2000, SLO: SLO{TTFT: 100 * time.Millisecond, Sheddable: sheddable}}
	}
	if _, err := p.Pick(req(true), ws, 1); err != nil {
		t.Errorf("a sheddable request with pod-0 idle: %v, want a pick", err)
	}
	for _, w := range ws {
		w.SetMetrics(&registry.Metrics{Scraped: epoch, Running: 1, KVUsage: 0.5})
	}
	if _, err := p.Pick(req(true), ws, 1); !errors.Is(err, ErrObjectives) {
		t.Errorf("a sheddable request with every pod busy: %v, want ErrObjectives", err)
	}
	if _, err := p.Pick(req(false), ws, 1); err != nil {
		t.Errorf("a request that is not sheddable: %v, want a pick", err)
	}
	ws[0].SetMetrics(&registry.Metrics{Scraped: epoch, Running: 1, KVUsage: 0.01})
	if _, err := p.Pick(req(true), ws, 1); err != nil {
		t.Errorf("a sheddable request with pod-0's KV cache nearly empty: %v, want a pick", err)
	}
}

// TestAPickWithAnObjectiveAllocatesNothing: judging the candidates and
// recording the prediction allocate nothing.
func TestAPickWithAnObjectiveAllocatesNothing(t *testing.T) {
	p, ws := sloPool(t, SLOConfig{})
	e := p.(*engine)
	var pr Prediction
	req := &Request{Model: "m", Tokens: 2000, SLO: SLO{TTFT: 4 * time.Second}, Predicted: &pr}
	dst := make([]*registry.Worker, 0, 2)
	if n := testing.AllocsPerRun(100, func() { _, _ = e.AppendPick(dst[:0], req, ws, 2) }); n != 0 && !raceEnabled {
		t.Errorf("a pick with an objective allocates %v times, want 0", n)
	}
}

// TestSLOConfigIsValidated: a headroom factor or exploration share out of
// range is refused, naming the field.
func TestSLOConfigIsValidated(t *testing.T) {
	for name, tc := range map[string]struct {
		slo  SLOConfig
		want string
	}{
		"negative factor": {SLOConfig{BufferFactor: -1}, "slo.bufferFactor"},
		"NaN factor":      {SLOConfig{BufferFactor: math.NaN()}, "slo.bufferFactor"},
		"share above 1":   {SLOConfig{ExploreNegative: new(1.5)}, "slo.exploreNegative"},
	} {
		t.Run(name, func(t *testing.T) {
			err := Config{SLO: &tc.slo}.Default().Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestTheFitFollowsAChangeAfterALongRun: a fit that has taken in 5,000
// samples in which one feature never varies (KV usage 0, no metrics) still
// forgets: when the latency doubles, its predictions are within 5% of the
// new figures after 400 more samples, as a young fit's would be.
func TestTheFitFollowsAChangeAfterALongRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	sample := func() features {
		return features{1, rng.Float64() * 8, float64(rng.IntN(6)), float64(rng.IntN(32)), 0}
	}
	before, after := features{0.02, 0.5, 0.1, 0.01, 0}, features{0.04, 1, 0.2, 0.02, 0}
	f := newFit()
	for range 5000 {
		x := sample()
		f.add(&x, dot(&before, &x))
	}
	for range 400 {
		x := sample()
		f.add(&x, dot(&after, &x))
	}
	for range 20 {
		x := sample()
		want, got := dot(&after, &x), dot(&f.theta, &x)
		if math.Abs(got-want) > 0.05*want {
			t.Fatalf("400 samples after the change, prediction for %v = %.4f s, want %.4f s within 5%%", x, got, want)
		}
	}
}

// TestARunningRequestsTPOTObjectiveIsKept: a request with only a TTFT
// objective, which both pods meet, goes by load to pod 1 (one request in
// flight against pod 0's two); when pod 1's request stated a TPOT
// objective of 50 ms, which pod 1 (80 ms a token) is predicted to break,
// it goes to pod 0 instead, as upstream judges a pod by the least TPOT
// objective of the requests running there.
func TestARunningRequestsTPOTObjectiveIsKept(t *testing.T) {
	for name, tc := range map[string]struct {
		running time.Duration
		want    int
	}{
		"none stated": {0, 1},
		"50 ms":       {50 * time.Millisecond, 0},
		"100 ms":      {100 * time.Millisecond, 1},
	} {
		t.Run(name, func(t *testing.T) {
			p, ws := sloPool(t, SLOConfig{ExploreNegative: new(0.0)})
			admit(t, ws[0], 2)
			g := ws[1].AdmitWith(tc.running)
			t.Cleanup(func() { g.Release() })
			req := &Request{Model: "m", Tokens: 2000, SLO: SLO{TTFT: 10 * time.Second}}
			if got, err := p.Pick(req, ws, 1); err != nil || got[0] != ws[tc.want] {
				t.Errorf("Pick = %v, %v; want pod-%d", got, err, tc.want)
			}
		})
	}
}

// TestASampledPickLooksAtThePoolForAPodThatMeetsTheObjectives: over 200
// pods, where the sample a cache-aware pick looks at has no pod predicted
// to meet a 500 ms objective (each runs a request and queues another, a
// second each), the one idle pod of the pool is found: every sheddable
// request goes there, none refused.
func TestASampledPickLooksAtThePoolForAPodThatMeetsTheObjectives(t *testing.T) {
	reg, ws := pool(200)
	p := build(t, Config{Name: CacheAware, SLO: &SLOConfig{Admission: true, ExploreNegative: new(0.0)}}, reg, nil).(*engine)
	p.slo.published.Store(&model{ttft: features{fPrefill: 1}, ttftOK: true})
	for i, w := range ws {
		m := &registry.Metrics{Scraped: epoch, Running: 1, Waiting: 1, KVUsage: 0.5}
		if i == 137 {
			m = &registry.Metrics{Scraped: epoch, KVUsage: 0.5}
		}
		w.SetMetrics(m)
	}
	for i := range 40 {
		req := &Request{Model: "m", Prompt: [][]byte{text(fmt.Sprint("prompt", i), 4<<10)}, SLO: SLO{TTFT: 500 * time.Millisecond, Sheddable: true}}
		got, err := p.Pick(req, ws, 1)
		if err != nil || got[0] != ws[137] {
			t.Fatalf("pick %d = %v, %v; want %s, the one pod predicted to meet the objective", i, got, err, ws[137].Address())
		}
	}
}

// TestAWholeResponseJudgesNoTPOTObjective: with wholeResponse, as
// upstream's predictor without streamingMode, a TPOT objective pod 1 is
// predicted to break is not judged: least-load sends the request to the
// idle pod 1, where otherwise it goes to pod 0.
func TestAWholeResponseJudgesNoTPOTObjective(t *testing.T) {
	for name, tc := range map[string]struct {
		whole bool
		want  int
	}{
		"first token": {false, 0},
		"whole":       {true, 1},
	} {
		t.Run(name, func(t *testing.T) {
			p, ws := sloPool(t, SLOConfig{WholeResponse: tc.whole, ExploreNegative: new(0.0)})
			admit(t, ws[0], 2)
			req := &Request{Model: "m", Tokens: 2000, SLO: SLO{TPOT: 50 * time.Millisecond}}
			if got, err := p.Pick(req, ws, 1); err != nil || got[0] != ws[tc.want] {
				t.Errorf("Pick = %v, %v; want pod-%d", got, err, tc.want)
			}
		})
	}
}
