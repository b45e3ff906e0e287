package app

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
)

// reporterConfig is upstream's sample configuration of the
// request-attribute-reporter, as upstream v1.5.0's integration test has it.
const reporterConfig = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: openai-parser
  - name: total-tokens-cost-reporter
    type: request-attribute-reporter
    parameters:
      attributes:
        - key:
            namespace: envoy.lb
            name: x-gateway-inference-request-cost
          expression: |
            usage.completion_tokens
          condition: "has(usage.completion_tokens)"
schedulingProfiles:
  - name: default
    plugins:
      - pluginRef: openai-parser
      - pluginRef: total-tokens-cost-reporter
parser:
  pluginRef: openai-parser
featureGates:
  - enableLegacyMetrics
`

// nativeReporterConfig is the same attribute in inferpick's own document,
// as the chart's picker.attributes writes it.
const nativeReporterConfig = `policy: {}
attributes:
- namespace: envoy.lb
  name: x-gateway-inference-request-cost
  expression: |
    usage.completion_tokens
  condition: has(usage.completion_tokens)
`

// TestReporterIsWiredToTheResponses: the config file's
// request-attribute-reporter, or its attributes list, reaches the ext_proc
// server, whose reply to the response's last body chunk carries the
// completion tokens as envoy.lb metadata.
func TestReporterIsWiredToTheResponses(t *testing.T) {
	for name, config := range map[string]string{
		"upstream's EndpointPickerConfig": reporterConfig,
		"inferpick's own document":        nativeReporterConfig,
	} {
		t.Run(name, func(t *testing.T) {
			reportsTheCost(t, config)
		})
	}
}

// reportsTheCost checks that a picker with the given config reports a
// response's 10 completion tokens as envoy.lb
// x-gateway-inference-request-cost.
func reportsTheCost(t *testing.T, config string) {
	t.Helper()
	o := staticOptions(t, "--static-endpoints", "127.0.0.1:1", "--config-text", config)
	runReady(t, o)
	stream := openRequest(t, extprocv3.NewExternalProcessorClient(dial(t, o.GRPCPort)))
	for range 2 { // the route and the body
		if _, err := stream.Recv(); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range []*extprocv3.ProcessingRequest{
		{Request: &extprocv3.ProcessingRequest_ResponseHeaders{ResponseHeaders: &extprocv3.HttpHeaders{Headers: &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
			{Key: ":status", RawValue: []byte("200")}, {Key: "content-type", RawValue: []byte("application/json")}}}}}},
		{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: &extprocv3.HttpBody{
			Body: []byte(`{"object":"text_completion","choices":[{"text":"hi"}],"usage":{"prompt_tokens":32,"completion_tokens":10,"total_tokens":42}}`), EndOfStream: true}}},
	} {
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stream.Recv(); err != nil { // the response headers
		t.Fatal(err)
	}
	last, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := last.GetDynamicMetadata().GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-inference-request-cost"]
	if got.GetNumberValue() != 10 {
		t.Errorf("the last body chunk's reply carries metadata %v, want envoy.lb x-gateway-inference-request-cost 10", last.GetDynamicMetadata())
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
}
