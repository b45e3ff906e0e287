// Package v1alpha2 holds the InferenceObjective and InferenceModelRewrite
// APIs of the Gateway API Inference Extension, group
// inference.networking.x-k8s.io, version v1alpha2, schema-identical to
// upstream. An objective gives the requests that name it a priority; the
// picker's flow control serves higher priorities first when the pool is
// saturated. A model rewrite sends the requests for one model name to other
// models, split by weight.
//
// +kubebuilder:object:generate=true
// +groupName=inference.networking.x-k8s.io
package v1alpha2
