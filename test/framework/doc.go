// Package framework holds what every test suite under test/ needs, once:
// binaries built once per test process, child processes with their output
// in a log file, free ports, a real control plane (etcd and kube-apiserver
// through envtest) with cleanup on every error path, object builders, one
// poll helper with named timeouts, a Prometheus page reader, a logger whose
// lines a test reads, helpers for the vllm-sim simulator and the gateway
// stand-in, and a client of vLLM's gRPC engine API (DialGRPC, Generate) for
// either of them.
//
// It is a normal package, not a _test.go file, so that the integration,
// end-to-end, reliability, benchmark and demo suites share it. Only code
// under test/ imports it.
//
// The functions come in two shapes: ones that return an error (for the
// benchmark and demo mains) and ones taking a testing.TB that fail the test
// and register their cleanup with t.Cleanup before the next step can fail.
package framework
