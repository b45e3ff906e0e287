package extproc

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/inferpick/inferpick/picker/flowcontrol"
	"github.com/inferpick/inferpick/picker/openai"
	"github.com/inferpick/inferpick/picker/policy"
)

// sloRecorder keeps the objectives of each request the policy picks for.
type sloRecorder struct {
	mu   sync.Mutex
	seen []policy.SLO
}

func (r *sloRecorder) record(req *policy.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, req.SLO)
}

func (r *sloRecorder) all() []policy.SLO {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]policy.SLO(nil), r.seen...)
}

// sloEnv serves twoWorkers with the objective "batch" of priority -1,
// recording the objectives each pick is asked with, and the log.
func sloEnv(t *testing.T, opts ...envOption) (*env, *sloRecorder, *logRecorder) {
	t.Helper()
	prios := flowcontrol.NewPriorities()
	prios.SetStatic("batch", -1)
	var logs *logRecorder
	// A clock that stands still: the objective the policy sees is what is
	// left of the request's at the pick, all of it here.
	clk := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	opts = append(opts, func(o *Options) { o.Priorities, logs, o.Clock = prios, recordLogs(o), clk })
	e := newEnv(t, twoWorkers, opts...)
	rec := &sloRecorder{}
	e.picker.seen = rec.record
	e.picker.predicts = true // objectives are acted on
	e.server.usePicker(e.picker)
	return e, rec, logs
}

// chatWith sends a chat request with the extra header pairs on a new
// stream.
func (e *env) chatWith(headers ...string) *session {
	s := e.open()
	body := chatBody("m", "hi")
	s.requestHeaders("/v1/chat/completions", len(body), false, nil, headers...)
	s.requestBody(body, true)
	return s
}

// The objectives a request's headers state, in milliseconds, reach the
// policy with the request; a request of negative priority is sheddable.
// A header given twice counts by its last value, as the picker's other
// headers do.
func TestLatencyObjectivesReachThePolicy(t *testing.T) {
	for name, tc := range map[string]struct {
		headers []string
		want    policy.SLO
	}{
		"none":          {},
		"both":          {headers: []string{"x-slo-ttft-ms", "250", "x-slo-tpot-ms", "12.5"}, want: policy.SLO{TTFT: 250 * time.Millisecond, TPOT: 12500 * time.Microsecond}},
		"ttft alone":    {headers: []string{"x-slo-ttft-ms", "1e3"}, want: policy.SLO{TTFT: time.Second}},
		"zero is none":  {headers: []string{"x-slo-ttft-ms", "0", "x-slo-tpot-ms", ""}},
		"the last wins": {headers: []string{"x-slo-ttft-ms", "oops", "x-slo-ttft-ms", "100"}, want: policy.SLO{TTFT: 100 * time.Millisecond}},
		"sheddable":     {headers: []string{"x-slo-tpot-ms", "20", ObjectiveHeader, "batch"}, want: policy.SLO{TPOT: 20 * time.Millisecond, Sheddable: true}},
	} {
		t.Run(name, func(t *testing.T) {
			e, rec, _ := sloEnv(t)
			e.chatWith(tc.headers...).routed(true)
			if diff := cmp.Diff([]policy.SLO{tc.want}, rec.all()); diff != "" {
				t.Errorf("objectives the policy saw (-want +got):\n%s", diff)
			}
		})
	}
}

// A request whose objective header the picker cannot read is answered 400
// naming the header and its value, holds no load, and ends its stream
// cleanly; the next request, without objectives, is routed with none.
func TestAnUnreadableObjectiveIsRefused(t *testing.T) {
	for name, tc := range map[string]struct{ header, value string }{
		"not a number":    {"x-slo-ttft-ms", "fast"},
		"negative":        {"x-slo-tpot-ms", "-5"},
		"not finite":      {"x-slo-ttft-ms", "Inf"},
		"nan":             {"x-slo-tpot-ms", "NaN"},
		"over a day":      {"x-slo-ttft-ms", "86400001"},
		"with a unit":     {"x-slo-ttft-ms", "200ms"},
		"the last is bad": {"x-slo-ttft-ms", "-1"},
	} {
		t.Run(name, func(t *testing.T) {
			e, rec, logs := sloEnv(t)
			headers := []string{tc.header, tc.value}
			if name == "the last is bad" {
				headers = append([]string{tc.header, "100"}, headers...)
			}
			s := e.open()
			body := chatBody("m", "hi")
			s.requestHeaders("/v1/chat/completions", len(body), false, nil, headers...)
			// Refused on its headers, the request's stream may have ended
			// by the time its body is sent.
			_ = s.stream.Send(reqBody(body, true))
			code, msg := s.immediateReply()
			if code != 400 || !strings.Contains(msg, tc.header) || !strings.Contains(msg, `\"`+tc.value+`\"`) {
				t.Errorf("reply %d %q, want 400 naming %s and %q", code, msg, tc.header, tc.value)
			}
			if st := s.endStatus(); st.Code() != codes.OK {
				t.Errorf("stream ended with %v, want OK", st)
			}
			if !strings.Contains(logs.String(), tc.header) {
				t.Errorf("log %q names no %s", logs.String(), tc.header)
			}
			if p, d := totalLoad(e.reg.Workers()...); p+d != 0 {
				t.Errorf("load %d after the refusal, want 0", p+d)
			}
			for range 3 { // whichever pooled exchange the stream gets
				e.chatWith().routed(true)
			}
			if diff := cmp.Diff([]policy.SLO{{}, {}, {}}, rec.all()); diff != "" {
				t.Errorf("objectives the policy saw (-want +got):\n%s", diff)
			}
		})
	}
}

// Where nothing acts on latency objectives (no slo block, no deadline
// order), an unreadable one is ignored, as the upstream picker ignores
// it: the request is routed, with no objective.
func TestAnUnreadableObjectiveNothingReadsIsIgnored(t *testing.T) {
	e, rec, _ := sloEnv(t)
	e.picker.predicts = false
	e.server.usePicker(e.picker)
	e.chatWith("x-slo-ttft-ms", "250ms", "x-slo-tpot-ms", "-1").routed(true)
	if diff := cmp.Diff([]policy.SLO{{}}, rec.all()); diff != "" {
		t.Errorf("objectives the policy saw (-want +got):\n%s", diff)
	}
}

// A gRPC request with an unreadable objective is refused as gRPC:
// INVALID_ARGUMENT, naming the header.
func TestAnUnreadableObjectiveIsRefusedToGRPC(t *testing.T) {
	e, _, _ := sloEnv(t)
	s := e.open()
	s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
		Headers: headerMap(":method", "POST", ":path", openai.GeneratePath, "content-type", "application/grpc", "x-slo-tpot-ms", "soon"),
	}}})
	_ = s.stream.Send(reqBody(string(generateText("hi")), true)) // the stream may have ended
	status, code, msg := s.grpcRefusal()
	if status != 400 || code != codes.InvalidArgument || !strings.Contains(msg, "x-slo-tpot-ms") {
		t.Errorf("refusal %d %v %q, want 400 INVALID_ARGUMENT naming x-slo-tpot-ms", status, code, msg)
	}
}

// parseObjective reads what strconv.ParseFloat reads, as milliseconds,
// within [0, 24h]; "" is no objective, and nothing else is refused.
func FuzzParseObjective(f *testing.F) {
	for _, s := range []string{"", "0", "250", "12.5", "1e3", "-1", "NaN", "Inf", "-0", "0x1p4", "86400000", "86400000.5", "1e-12", " 5", "1_0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseObjective(s)
		if gotB, errB := parseObjective([]byte(s)); gotB != got || (errB == nil) != (err == nil) {
			t.Fatalf("parseObjective(%q) is %v, %v as a string and %v, %v as bytes", s, got, err, gotB, errB)
		}
		if s == "" {
			if got != 0 || err != nil {
				t.Fatalf(`parseObjective("") = %v, %v, want none`, got, err)
			}
			return
		}
		ms, perr := strconv.ParseFloat(s, 64)
		valid := perr == nil && !math.IsNaN(ms) && ms >= 0 && ms <= 86400000
		if valid != (err == nil) {
			t.Fatalf("parseObjective(%q) = %v, %v; ParseFloat reads %v, %v", s, got, err, ms, perr)
		}
		if err != nil {
			if !errors.Is(err, errObjective) {
				t.Fatalf("parseObjective(%q) error %v, want errObjective", s, err)
			}
			return
		}
		if want := time.Duration(ms * 1e6); got != want && !(want == 0 && ms > 0 && got == 1) {
			t.Fatalf("parseObjective(%q) = %v, want %v", s, got, want)
		}
		if got < 0 || got > 24*time.Hour {
			t.Fatalf("parseObjective(%q) = %v, out of [0, 24h]", s, got)
		}
	})
}

// Reading a request's objectives allocates nothing.
func TestReadingObjectivesAllocatesNothing(t *testing.T) {
	hs := headerMap("x-slo-ttft-ms", "250", "x-slo-tpot-ms", "12.5").GetHeaders()
	var o objectives
	if n := testing.AllocsPerRun(100, func() {
		for _, h := range hs {
			o.read(h)
		}
	}); n != 0 {
		t.Errorf("%v allocations reading the objectives, want none", n)
	}
	if want := (policy.SLO{TTFT: 250 * time.Millisecond, TPOT: 12500 * time.Microsecond}); o.slo != want {
		t.Errorf("read %+v, want %+v", o.slo, want)
	}
}

// With the queue ordered by deadline, a request whose x-slo-ttft-ms runs
// out first leaves the queue first, though it came last.
func TestQueuedRequestsLeaveByDeadline(t *testing.T) {
	// 0 states no objective but is due at once, as upstream orders it.
	for _, early := range []string{"100", "0"} {
		t.Run(early, func(t *testing.T) {
			e, q, _ := queueEnv(t, flowcontrol.Options{Ordering: flowcontrol.OrderDeadline, MaxWait: 10 * time.Second})
			busy := e.open()
			busy.sendRequest("interactive")
			busy.routed(true)
			late := e.chatWith("x-slo-ttft-ms", "60000")
			eventually(t, "the first request queued", func() bool { return q.Len() == 1 })
			first := e.chatWith("x-slo-ttft-ms", early)
			eventually(t, "the second request queued", func() bool { return q.Len() == 2 })

			busy.responseHeaders(200, "application/json", true, "")
			busy.recv()
			first.routed(true)
			if n := q.Len(); n != 1 {
				t.Errorf("%d waiting once the earlier deadline was routed, want the later one", n)
			}
			first.responseHeaders(200, "application/json", true, "")
			first.recv()
			late.routed(true)
		})
	}
}
