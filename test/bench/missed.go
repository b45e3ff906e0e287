package main

import "strings"

// missedBecause explains, from profiles and the measurements that go with
// them, why a target can be missed. Keyed by the start of the target's text.
func missedBecause(target string) (string, bool) {
	for prefix, why := range explanations {
		if strings.HasPrefix(target, prefix) {
			return why, true
		}
	}
	return "", false
}

var explanations = map[string]string{
	"priority-mix: interactive TTFT p90": "with flow control no interactive request is refused (without it many are, " +
		"see the table), and batch absorbs the overload in the queue, but an interactive arrival still finds every " +
		"slot held by batch requests admitted before it: it waits for the next release (one every few tens of " +
		"milliseconds here) and is then prefilled in the same engine steps as the batch requests dispatched with it. " +
		"Strict priority orders the queue, not the slots. The next step is headroom per priority: admit a band below " +
		"the highest only while a pod has fewer than maxInFlight − reserve requests in flight, so an interactive " +
		"arrival finds a free slot at once.",
	"whole pick, 400 KB": "the cost is the one pass over the body. A CPU profile " +
		"(`go test -run '^$' -bench 'Handle/body=400KB/workers=100' -cpuprofile cpu.out ./picker/extproc/`, " +
		"then `go tool pprof -top`) puts it in the parser's string scan (`lexer.str`: `bytes.IndexByte` for the " +
		"closing quote or a backslash, then `utf8.Valid` over the same bytes), the prompt's block hashing and the " +
		"copy of the body out of the gRPC messages. Per byte it is cheaper than at 32 KB in instructions but not in " +
		"time: a 400 KB body does not fit the L2 cache, so every pass reads memory. Fusing the UTF-8 check into the " +
		"quote scan (one pass instead of two) is the next step.",
	"prefix index ≤ 32 bytes": "a block costs a 24-byte node and an 8-byte table slot; the fixed per-shard part " +
		"tips the worst point (right after a table doubles) just over 32 bytes, and between doublings it is 29–31. " +
		"Growing the tables at a higher load factor would meet it.",
	"scraping 100 endpoints": "parsing is a small part: `BenchmarkParse` reads a vLLM page in about 12 µs of CPU " +
		"with no allocation (about 90× less than `expfmt`). The rest of the CPU per scrape is HTTP — building the " +
		"request, the loopback round trip and the connection's system calls — times 100 endpoints × 20 scrapes/s. " +
		"`--refresh-metrics-interval=100ms` halves it; the staleness bound then wants about 300 ms.",
	"cache-aware TTFT p90 ≤ 0.8 × weighted-scorer": "the p90 at these rates is set by the first, cold request of " +
		"each prefix group, which no policy can serve from cache, plus the client-side transport time multiplied by " +
		"the time scale on a loaded machine. Compare the simulators' own mean simulated TTFT (engine time only) in " +
		"the routing table: there cache-aware is well below the weighted scorer.",
	"cache-aware no-sharing": "with nothing shared, cache-aware ranks by load like least-load; the simulators' mean " +
		"simulated TTFT of the two agrees in the routing table, and the client-side p90 gap is transport noise of the " +
		"loaded machine multiplied by the time scale.",
}
