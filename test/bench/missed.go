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
	"priority-mix: interactive TTFT p90": "strict priority orders the queue, not the slots: an interactive arrival " +
		"that finds every slot held by batch requests admitted before it waits for the next release and is then " +
		"prefilled beside the batch requests dispatched with it. `--flow-control-reserved-slots` keeps places free " +
		"for it; the run with one place reserved shows how much a smaller reserve costs. Next: a reserve sized from " +
		"the measured interactive arrival rate instead of a flag.",
	"matrix: cache-aware TTFT p90 ≤ weighted-scorer's": "both policies reach the oracle's hit rate in these " +
		"cells and prefill the same tokens; what differs is which pods' prefills collide. The misses are mostly " +
		"multi-turn (sessions pinned to their pods by both) and shared-prefix with roomy caches, by a few percent " +
		"up to about a fifth, where one collision moves the p90 by a prefill; which cells miss changes from run to " +
		"run. Next: spread new sessions by the prefill they will bring over their life, not by the load at their " +
		"first turn, and compare medians of three runs per cell.",
	"matrix: cache-aware TTFT p90 ≤ 0.5 × round-robin's": "in the cells whose caches hold 1.5 prompts at 0.3 ms a " +
		"token, even the best hit rate any policy reaches leaves more than 10% of the requests to prefill their " +
		"whole prompt, so the p90 of every policy, round-robin's included, is such a prefill: no router meets the " +
		"ratio there on shared-prefix, and multi-turn misses it by about 5%.",
	"matrix: cache-aware no-sharing": "with nothing shared cache-aware ranks by load as least-load does; the gaps " +
		"are of the size of the run-to-run spread of a 120-request p90 on this machine.",
	"3 replicas:": "a trace of every replica's picks (prefix key, home, choice, loads and costs) shows prefixes new " +
		"to a replica now going to their home in about 42 of 50 picks (8 of 50 before the home's bound kept a " +
		"request of slack and its credit applied from a run's first prompts). What remains is TTFT, since replicas " +
		"read each other's load from scrapes up to 50 ms old and pile onto the same cheapest pod together, and the " +
		"multi-turn hit rate, since a session's turns alternate between replicas and a turn one replica spilled off " +
		"the home leaves the others sending the next turn home, cold. Next: trace one multi-turn session across the " +
		"replicas to split the two, then spread concurrent spills by the replica's identity.",
	"whole pick, 400 KB": "the parse and the hashing are the small part. A CPU profile " +
		"(`go test -tags vtprotobuf -run '^$' -bench 'Handle/body=400KB/workers=100' -benchtime 3s -cpuprofile cpu.out ./picker/extproc/`, " +
		"then `go tool pprof -top`) puts most of it in recording the pick: `prefix.(*Index).Insert` touches each of the " +
		"prompt's ~6,400 blocks (`shard.touch`: a table probe when the hint misses, then moving the node to the front " +
		"of the worker's recency list), and every pick of the benchmark brings ~3,200 new blocks, so as many old ones " +
		"are evicted (`shrink` → `drop`: a table probe each), least recently used first across shards. The next step " +
		"is a cheaper touch and drop for long prompts: a recency stamp per node (CLOCK-style eviction) instead of " +
		"relinking a list, and nodes the table holds itself, so that dropping one needs no probe.",
	"whole pick at 1,000 workers": "every pick visits every candidate: its removal flag, metrics and staleness, its " +
		"guard-counted load, a tie key, then the cost and the selection of the primary and fallbacks — about 20–30 ns a " +
		"worker, mostly cache misses on the worker objects, which is most of a 1 KB pick at 1,000 workers. The next step " +
		"is a candidate set that does not grow with the pool: the workers the prefix index matched plus the few least " +
		"loaded from a load-ordered structure the guards keep up to date.",
	"full ext_proc exchange": "a CPU profile of `BenchmarkExchange` (its `cpu-ns/op` is the picker's own CPU) puts " +
		"most of a 1 KB exchange in gRPC's transport: the write and read system calls, the network poller and " +
		"goroutine wake-ups per message, and the HTTP/2 frame and header handling; the pick is a few µs. At 400 KB the " +
		"body is copied by the proto decoder (each 16 KB chunk), into the request buffer, and into the streamed-back " +
		"chunks, and the prefix index is updated for every block (see the 400 KB pick). Next steps: decode request " +
		"messages without copying the body (a codec that keeps gRPC's receive buffer for the exchange), and the cheaper " +
		"index touch.",
	"≤ 60 allocations": "the picker's own share is two: the load guard and, with fallbacks, the destination " +
		"list's string. Received messages are decoded in place into a per-stream message that reuses its wrappers, " +
		"header values and body buffer (`picker/extproc/inbound.go`, held to proto.Unmarshal by `FuzzInbound`); " +
		"replies are reused, marshalled by vtprotobuf into pooled buffers and handed to gRPC in slots of a shared " +
		"slab; the policy appends its pick to the exchange's own slice; a request id the picker makes becomes a " +
		"string only when it is logged or traced. The rest, about 57, is grpc-go's server transport per stream: the " +
		"stream and its contexts, the HPACK-decoded request headers, the data frames, the status written at the end " +
		"(`go test -tags vtprotobuf -run '^$' -bench 'Exchange/body=1KB/workers=8$' -benchtime 3000x -memprofile mem.out " +
		"-memprofilerate 1 ./picker/extproc/`, then `go tool pprof -sample_index=alloc_objects -top`). Going much " +
		"lower needs a transport that reuses per-stream state, which grpc-go does not offer.",
	"prefix index ≤ 24 bytes": "a block costs a 24-byte node (hash, worker slot, recency links, next holder) and an " +
		"8-byte table slot, plus the per-shard slack. Reaching 24 bytes needs the table to hold the nodes (open " +
		"addressing over nodes, no separate slot) or a 16-byte node (a 32-bit hash beside the table's tag).",
	"scraping 100 endpoints": "one ticker tells every worker's poller when a scrape is due, so the answers arrive " +
		"in a burst the network poller collects in a few wake-ups; each poller writes its request once the poller waits " +
		"for the answer and takes the answer in one read, on a keep-alive connection that also carries /v1/models. " +
		"What is left per scrape is one write and one read system call (most of it the kernel's loopback TCP) and the " +
		"parse (`BenchmarkParse`: about 13 µs, no allocation), times 100 endpoints × 20 scrapes/s. " +
		"`--refresh-metrics-interval=100ms` halves it.",
	"cache-aware TTFT p90 ≤ 0.8 × weighted-scorer": "the p90 at these rates is set by the first, cold request of " +
		"each prefix group, which no policy can serve from cache, plus the client-side transport time multiplied by " +
		"the time scale on a loaded machine. Compare the simulators' own mean simulated TTFT (engine time only) in " +
		"the routing table: there cache-aware is well below the weighted scorer.",
	"cache-aware no-sharing": "with nothing shared, cache-aware ranks by load like least-load; the simulators' mean " +
		"simulated TTFT of the two agrees in the routing table, and the client-side p90 gap is transport noise of the " +
		"loaded machine multiplied by the time scale.",
}
