// Package reliability is the suite that drives real inferpick and vllm-sim
// processes through the gateway stand-in (and, for cluster mode, a real API
// server) to prove that load counts never leak, nothing routed is lost,
// and bad input or faults leave the picker serving. docs/reliability.md
// lists each guarantee with the test that proves it.
package reliability
