// Package v1 holds the InferencePool API of the Gateway API Inference
// Extension, group inference.networking.k8s.io, version v1.
//
// The schema matches the upstream v1 API field for field, so an
// InferencePool written for any conforming gateway is read here unchanged,
// and a CRD generated from these types can stand in for the upstream one.
// inferpick only reads pools; it never writes their status.
//
// +kubebuilder:object:generate=true
// +groupName=inference.networking.k8s.io
package v1
