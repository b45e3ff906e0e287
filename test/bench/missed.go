package main

import "strings"

// missedBecause explains, from profiles and the measurements that go with
// them, why a target can be missed. Keyed by the start of the target's text:
// the longest key that starts it.
func missedBecause(target string) (string, bool) {
	key := ""
	for prefix := range explanations {
		if strings.HasPrefix(target, prefix) && len(prefix) > len(key) {
			key = prefix
		}
	}
	if key == "" {
		return "", false
	}
	return explanations[key], true
}

var explanations = map[string]string{
	"priority-mix: interactive TTFT p90": "strict priority orders the queue, not the slots: an interactive arrival " +
		"that finds every slot held by batch requests admitted before it waits for the next release and is then " +
		"prefilled beside the batch requests dispatched with it. `--flow-control-reserved-slots` keeps places free " +
		"for it; the run with one place reserved shows how much a smaller reserve costs. Next: a reserve sized from " +
		"the measured interactive arrival rate instead of a flag.",
	"matrix: cache-aware TTFT p90 ≤ weighted-scorer's": "where both policies reach the oracle's hit rate, their " +
		"p90s differ by about the run-to-run spread: at time scale 0.1 a millisecond of this host's scheduling " +
		"delay in a step is ten simulated ones. A verdict within 10% after three runs is decided by seven runs of " +
		"each policy at time scale 0.2 (column at 0.2). In the run at af3a366, 17 cells were decided so and " +
		"cache-aware met the target in each, the nearest being multi-turn at 2 ms a token, 4 prompts, 64 " +
		"sequences (0.556 against 0.559 s). Next: run a missed cell again with `go run ./test/bench -only " +
		"matrix -cells <cell> -workloads <workload> -policies cache-aware,weighted-scorer` and compare the hit " +
		"rates and the spread of the runs at 0.2.",
	"matrix: cache-aware TTFT p90 ≤ 0.5 × round-robin's": "in the shared-prefix cells whose caches hold 1.5 " +
		"prompts at 0.3 ms a token no placement meets it. A pod's cache (187 blocks of 16 tokens) holds one " +
		"2,050-token prompt and the head of a second, so with 16 prompts over 8 pods a request whose prompt is not " +
		"the one its pod served last prefills about half of it, and one that arrives while its pod prefills shares " +
		"that step. Round-robin's p90 is a whole prefill (0.64 s), so the target asks that nine requests in ten " +
		"take at most half of one. Measured with a fixed placement of two prompts a pod, the one that keeps the " +
		"most of each prompt cached (`go run ./test/bench -only matrix -cells 0.3/1.5/2,0.3/1.5/16,1/1.5/2 " +
		"-workloads shared-prefix -policies pinned-pairs,cache-aware -matrix-runs 1`): hit rate 0.65 and TTFT p90 " +
		"0.574 s and 0.589 s at 2 and 16 sequences, where cache-aware in the same run reached 0.67 and 0.540 s and " +
		"0.547 s (at 1 ms, 2 sequences: 2.400 s against 2.110 s). Multi-turn meets the ratio in these cells.",
	"matrix: cache-aware no-sharing": "with nothing shared cache-aware ranks by load as least-load does; the gaps " +
		"are of the size of the run-to-run spread of a 120-request p90 on this machine (column runs and the ranges " +
		"in parentheses). A cell whose medians lie within 10% after three runs is decided by seven runs of each at " +
		"time scale 0.2 (column at 0.2); next, run it again with " +
		"`go run ./test/bench -only matrix -cells <cell> -workloads no-sharing -policies cache-aware,least-load`.",
	"3 replicas:": "the p90 of 288 requests is the 259th, so the target allows 29 requests over 1.1 × one " +
		"picker's p90 (the row counts them), and a prompt's first request takes a whole prefill (0.63–0.68 s " +
		"alone on its pod). One picker leaves 28 requests over 0.3 s in every run (the 16 prompts' first and 12 " +
		"that queued behind them): its p90 sits just below that cliff, three replicas' (37–41 requests over 0.3 s " +
		"in ten runs) above it. No placement avoids those 28 (a prompt's first request, and one that arrives while " +
		"that request is prefilled, waits for a whole prefill wherever it goes), so three replicas may add one. " +
		"The miss is the cold start's: once every prompt has been sent, three replicas' " +
		"p90 is within about a tenth of one picker's (figures above). Traces of each request's pod " +
		"and TTFT (real time, two runs each) show where " +
		"the extra ones come from: in the first two seconds, before a prompt's blocks are published (a server " +
		"publishes a step's blocks when the step ends, and a prompt of about 2,100 tokens is two steps of 2,048 " +
		"tokens), replicas send new prompts to their homes, and the homes of 16 prompts over 8 pods fall as balls " +
		"in bins: one pod was the home of four of them and took four first requests within 0.25 s (1.2–1.8 s each) " +
		"while another took none. A prompt sent to a pod whose first prompt has only its second step left (52 " +
		"tokens) makes that step a whole prefill, so the first prompt's requests wait 1.2 s instead of 0.6 s. " +
		"A replica sees another's request on a pod at the next scrape as one request, not " +
		"as the 2,100-token prefill it is, so the bounded load lets the home keep its prompts. Tried and not kept, " +
		"each leaving 36 to 51 requests over 0.3 s: no home credit and no order cost (new prompts spread, but " +
		"replicas then sent a prompt's second request to another idle pod while its first was still being " +
		"prefilled at home, a second cold prefill); weighing the others' requests on a pod at this replica's own " +
		"picks' mean prefill; the prefill others started on a pod, from the growth of the servers' prefix-cache " +
		"counters (`vllm:prefix_cache_queries_total` less `vllm:prefix_cache_hits_total`) less this replica's own, " +
		"drained at the measured prefill speed (new prompts spread, but replicas also left a prompt's home while " +
		"its first request was still being prefilled there: hit rate 0.867–0.870); scraping every 20 ms (at time " +
		"scale 0.2); for a prompt no replica has published, counting this replica's own requests in prefill and " +
		"the others' beyond a pod's first as whole prefills of it (37–42 requests over 0.3 s in six runs); no home " +
		"credit while the home shows only this replica's own work (37–39); the home's load bound taken from the " +
		"servers' figures alone, which every replica reads alike (requests sent to another pod than their " +
		"prompt's first went from 13–14 to 7–8 in the first 5 s, but 38–40 requests over 0.3 s, and multi-turn's " +
		"p90 reached 0.49 s in two of three runs); the whole credit (the reuse rate, not the others' share of it) " +
		"and 0.3 of it, and no extrapolation of the others' load from this replica's picks since the scrape (36–42 " +
		"requests over 0.3 s in two runs each, 36 of them from the first 4 s in every run); holding a request " +
		"whose prompt no server was known to hold, while its home showed requests this replica had not sent, " +
		"until the home's next batch of events (at most 0.8 s), then picking again without the home's credit " +
		"when that batch did not hold the prompt (38–39 requests over 0.28 s in three traced runs, p90 0.54 s: " +
		"a prompt that another replica's request had queued behind the home's step shows in no batch, so the " +
		"hold split it over two pods instead of stacking). Each either stacks " +
		"different prompts on a home or splits one prompt over two pods: until a prompt's first step is " +
		"published, a replica cannot tell which of the two a busy home holds. Servers that publish a step's " +
		"events as it starts (rows \"events when scheduled\") do not change that by themselves (figures " +
		"above): a prompt the events show nowhere still gets its home's credit for " +
		"a prefill another replica may have started. Dropping that credit when the events show the prompt " +
		"nowhere, right only with such servers, was tried by hand (two runs each of one and three replicas, " +
		"`go run ./test/bench -only replicas -replica-runs 2` with the other rows left out): 0.466 and 0.475 s " +
		"against 0.254 and 0.260 s. Those runs were not traced; a request queued at a busy pod shows in no event " +
		"until its step starts. Next: tell the picker when its servers publish, by a setting or from the lag of its " +
		"own prompts' events, and drop the credit then.",
	"3 replicas: multi-turn TTFT p90": "the runs split in two: in 14 hand runs of the same picker before the run at 543f68a, 3 " +
		"three-replica runs had a p90 of 0.45–0.53 s and the other 11 0.34–0.40 s (median 0.36 s, within the " +
		"target), so a median of three lands on either side (column p90 range). Every conversation's first turn is a cold prefill of about " +
		"1,000 tokens, and the 24 conversations begin within the first second. A picker trace shows the slow runs' " +
		"cause: a prefix no replica knows gets its home's credit (the chance that another replica sent it there " +
		"first, which shared-prefix@18 needs to keep a prompt's concurrent requests on one pod), but a new " +
		"conversation is a prefix no other replica will send, and another replica's request on a pod counts as " +
		"one request of load, not the prefill it is. When several new conversations share a home, replicas " +
		"stack their first turns there: three on one pod within 0.09 s while another pod held one. At a " +
		"prefix's first request a replica cannot tell one that recurs from one that does not. Tried by hand: " +
		"the credit's chance taken from this replica's own new prefixes, as the share that came to it again within " +
		"0.5 s (from even odds at the start) in place of the presumed one; all 10 three-replica multi-turn runs " +
		"then had a p90 of 0.346–0.381 s, but shared-prefix@18 left 43–46 requests over 0.3 s (38–41 without) " +
		"at a hit rate of 0.880–0.894. Ten more runs of the same picker on 2026-12-06 (load average about 2) " +
		"all had 0.332–0.356 s. Next: a measure that drops the credit for conversations within the first " +
		"second and keeps it for prompts that recur.",
	"whole pick, 400 KB": "a CPU profile (`go test -tags vtprotobuf -run '^$' -bench '^BenchmarkHandle$/body=400KB/workers=100$' " +
		"-benchtime 4000x -cpuprofile cpu.out ./picker/extproc/`, then `go tool pprof -top`) splits it into recording " +
		"the pick in the index (about a quarter: each of the prompt's ~6,400 blocks is read to confirm it is the " +
		"worker's and touched), copying the body chunks (about a fifth, here from memory the CPU caches do not hold: " +
		"the benchmark cycles 64 bodies of 400 KB), hashing (about a fifth) and the body parse (about 15%). One of " +
		"three replicas costs more (`BenchmarkHandleReplica`): two of the 16 tenants share a home at 100 workers, " +
		"their conversations exceed its capacity and every pick there inserts and evicts half a prompt. Next: nodes " +
		"of 16 bytes, so that a prompt's nodes take fewer cache lines, and parsing the body as its chunks arrive " +
		"instead of after the last.",
	"whole pick at 1,000 workers": "a cache-aware pick over more than 128 pods costs a sample of 32 of them, the " +
		"pods the prefix index names, the prompt's four heaviest pods in its rendezvous order (ranked over a cached " +
		"array of the pods' keys) and an adapter's recent pods (`picker/policy/sample.go`), so at 1 KB and 32 KB it " +
		"costs about what it costs at 100. What still grows is recording the pick in the index: a 400 KB pick evicts " +
		"hundreds of blocks, and with ten times the workers the index holds up to ten times the blocks, so each " +
		"eviction's table probe misses the CPU caches (`shard.drop` and `table.remove` lead the profile of " +
		"`BenchmarkHandle/body=400KB/workers=1000`). Next: evictions batched per shard in table order, so the probes " +
		"walk memory instead of jumping.",
	"full ext_proc exchange": "the exchange runs over inferpick's own HTTP/2 transport " +
		"(`--extproc-transport=direct`, `picker/extproc/direct*.go`): one goroutine per gateway connection reads " +
		"the frames, runs each message's step and writes the replies, flushing once it has handled everything that " +
		"had arrived. Over grpc-go's transport the 1 KB exchange at 8 streams cost 135.0 µs (report of 2026-12-04 " +
		"17:44 UTC), where a CPU profile put a fifth in goroutine wake-ups (a hand-off to the stream's goroutine per " +
		"message and to the writer per reply) and a quarter in system calls. What is left per exchange is the " +
		"exchange itself (parse, pick, index, replies: about a quarter of the grpc-go figure), one read and one " +
		"write system call per batch of frames, and HTTP/2 framing. Next: compare the per-setting profile " +
		"(`--enable-pprof` on the load test's picker) with the last report's; at 400 KB the body is still copied " +
		"from the frames into the request buffer and again into the streamed-back chunks.",
	"≤ 60 allocations": "the picker's own share is two: the load guard and, with fallbacks, the destination " +
		"list's string. Received messages are decoded in place into a per-stream message that reuses its wrappers, " +
		"header values and body buffer (`picker/extproc/inbound.go`, held to proto.Unmarshal by `FuzzInbound`); " +
		"replies are reused and marshalled by vtprotobuf into pooled buffers; a request id the picker makes becomes " +
		"a string only when it is logged or traced. The direct transport adds the stream and the HPACK-decoded " +
		"request headers of each stream, about 11 (`go test -tags vtprotobuf -run '^$' -bench " +
		"'Exchange/body=1KB/workers=8$' -benchtime 3000x -memprofile mem.out -memprofilerate 1 ./picker/extproc/`, " +
		"then `go tool pprof -sample_index=alloc_objects -top`); over grpc-go's transport the exchange took 59.",
	"prefix index ≤ 24 bytes": "a block costs a 16-byte node (48 bits of its hash, the worker's slot, recency " +
		"links, tick) and a 4-byte table slot at a load of 0.6 to 0.75 (5.3 to 6.7 bytes), 22–23 bytes in all " +
		"(`picker/prefix/table.go`); more than that is slack in the node slabs or a table grown past its bound. " +
		"Profile with `go test -run '^$' -bench IndexMemory -memprofile mem.out ./picker/prefix/`.",
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
