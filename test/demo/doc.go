// Command demo runs the whole inferpick system on one machine and shows it at
// work: a real kube-apiserver and etcd (through controller-runtime's envtest)
// holding an InferencePool and four model-server Pods, four vllm-sim processes
// serving those Pods' addresses, inferpick watching the pool through the API
// server, and the Envoy ext_proc stand-in of package gateway in front of them.
// A shared-prefix chat workload goes through the gateway; the demo then
// reports where requests went, how often the simulated KV caches were hit,
// the time to first token seen by the client, and the in-flight load inferpick
// holds once everything is over, which must be zero.
//
// `make demo` builds the binaries and runs it. The control plane stands in for
// the kubelet by writing each Pod's status (Ready, podIP 127.0.0.x) itself.
//
// Everything the demo starts stops when it ends, fails or is interrupted.
// With KEEP=1 it stays up after the report until Ctrl-C, so the pool can be
// poked at with kubectl and curl.
package main
