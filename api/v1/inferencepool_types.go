package v1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InferencePool is a set of model-server Pods that a gateway balances
// inference requests over, together with the endpoint picker that chooses
// the Pod for each request.
//
// +kubebuilder:object:root=true
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes-sigs/gateway-api-inference-extension/pull/1173"
// +kubebuilder:metadata:annotations="inference.networking.k8s.io/bundle-version=v1.6.0"
// +kubebuilder:resource:shortName=infpool
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Selector",type=string,JSONPath=`.spec.selector.matchLabels`,priority=1
// +kubebuilder:printcolumn:name="Ports",type=string,JSONPath=`.spec.targetPorts`
// +kubebuilder:printcolumn:name="Picker",type=string,JSONPath=`.spec.endpointPickerRef.name`
// +kubebuilder:printcolumn:name="Failure Mode",type=string,JSONPath=`.spec.endpointPickerRef.failureMode`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InferencePool struct {
	metav1.TypeMeta `json:",inline"`

	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the pool is made of and who picks its endpoints.
	//
	// +required
	Spec InferencePoolSpec `json:"spec,omitzero"`

	// Status is written by the gateways (parents) that use the pool.
	//
	// +optional
	Status InferencePoolStatus `json:"status,omitempty"`
}

// InferencePoolList is a list of InferencePools.
//
// +kubebuilder:object:root=true
type InferencePoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferencePool `json:"items"`
}

// InferencePoolSpec is the desired state of an InferencePool.
type InferencePoolSpec struct {
	// Selector chooses the member Pods by their labels, in the pool's own
	// namespace only.
	//
	// +required
	Selector LabelSelector `json:"selector,omitzero"`

	// TargetPorts are the ports the model servers listen on. Each port of
	// each member Pod is a separate endpoint, addressed as podIP:number.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:XValidation:message="port number must be unique",rule="self.all(p1, self.exists_one(p2, p1.number==p2.number))"
	// +listType=atomic
	// +required
	TargetPorts []Port `json:"targetPorts,omitempty"`

	// AppProtocol is the protocol spoken on every target port: "http"
	// (HTTP/1.1, the default) or "kubernetes.io/h2c" (HTTP/2 without TLS).
	//
	// +kubebuilder:validation:Enum=http;"kubernetes.io/h2c"
	// +kubebuilder:default="http"
	// +optional
	AppProtocol AppProtocol `json:"appProtocol,omitempty"`

	// EndpointPickerRef points at the endpoint picker that chooses a Pod for
	// each request, and says what the gateway does when it cannot reach it.
	//
	// +optional
	EndpointPickerRef *EndpointPickerRef `json:"endpointPickerRef,omitempty"`
}

// Port is a port number on the member Pods.
type Port struct {
	// Number is the port, 1 to 65535.
	//
	// +required
	Number PortNumber `json:"number,omitempty"`
}

// AppProtocol is the application protocol of the target ports.
type AppProtocol string

const (
	// AppProtocolHTTP is HTTP/1.1, the default.
	AppProtocolHTTP AppProtocol = "http"
	// AppProtocolH2C is HTTP/2 over cleartext, as used by gRPC model servers.
	AppProtocolH2C AppProtocol = "kubernetes.io/h2c"
)

// EndpointPickerRef refers to the endpoint picker of a pool.
//
// +kubebuilder:validation:XValidation:rule="self.kind != 'Service' || has(self.port)",message="port is required when kind is 'Service' or unspecified (defaults to 'Service')"
type EndpointPickerRef struct {
	// Group is the API group of the picker object; "" (the core group) when
	// unset.
	//
	// +optional
	// +kubebuilder:default=""
	Group *Group `json:"group,omitempty"`

	// Kind is the kind of the picker object, "Service" when unset.
	// ExternalName Services are not supported: they may resolve outside the
	// cluster.
	//
	// +optional
	// +kubebuilder:default=Service
	Kind Kind `json:"kind,omitempty"`

	// Name is the name of the picker object, in the pool's namespace.
	//
	// +required
	Name ObjectName `json:"name,omitempty"`

	// Port is the port of the picker. It is required for a Service, where
	// it is the Service port (not the target port).
	//
	// +optional
	Port *Port `json:"port,omitempty"`

	// FailureMode is what the gateway does when the picker does not answer:
	// "FailClose" (the default) rejects the request, "FailOpen" sends it to
	// an endpoint of the gateway's own choosing.
	//
	// +optional
	// +kubebuilder:default="FailClose"
	FailureMode EndpointPickerFailureMode `json:"failureMode,omitempty"`
}

// EndpointPickerFailureMode is how a gateway behaves when the endpoint picker
// is unreachable.
//
// +kubebuilder:validation:Enum=FailOpen;FailClose
type EndpointPickerFailureMode string

const (
	// EndpointPickerFailOpen makes the gateway route the request itself.
	EndpointPickerFailOpen EndpointPickerFailureMode = "FailOpen"
	// EndpointPickerFailClose makes the gateway fail the request.
	EndpointPickerFailClose EndpointPickerFailureMode = "FailClose"
)

// InferencePoolStatus is the state of the pool as seen by its parents.
type InferencePoolStatus struct {
	// Parents holds one entry per parent (usually a Gateway) that uses the
	// pool. Each parent's controller adds its entry and removes it when it
	// stops using the pool; an empty list means no parent uses it.
	//
	// +kubebuilder:validation:MaxItems=32
	// +optional
	// +listType=atomic
	Parents []ParentStatus `json:"parents,omitempty"`
}

// ParentStatus is the state of the pool as one parent sees it.
type ParentStatus struct {
	// Conditions are the parent's observations of the pool, such as
	// "Accepted" and "ResolvedRefs".
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ParentRef identifies the parent this entry belongs to.
	//
	// +required
	ParentRef ParentReference `json:"parentRef,omitzero"`

	// ControllerName names the controller that wrote this entry, in the
	// form DOMAIN/PATH (for a Gateway, its GatewayClass controllerName).
	//
	// +optional
	ControllerName ControllerName `json:"controllerName,omitempty"`
}

// ControllerName is a domain-prefixed path naming a controller, such as
// "example.com/gateway-controller". A bare domain is not valid.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/[A-Za-z0-9\/\-._~%!$&'()*+,;=:]+$`
type ControllerName string

// ParentReference identifies the parent of a pool, usually a Gateway.
type ParentReference struct {
	// Group is the parent's API group, "gateway.networking.k8s.io" when
	// unset.
	//
	// +optional
	// +kubebuilder:default="gateway.networking.k8s.io"
	Group *Group `json:"group,omitempty"`

	// Kind is the parent's kind, "Gateway" when unset.
	//
	// +optional
	// +kubebuilder:default=Gateway
	Kind Kind `json:"kind,omitempty"`

	// Name is the parent's name.
	//
	// +required
	Name ObjectName `json:"name,omitempty"`

	// Namespace is the parent's namespace, the pool's own when unset. A
	// parent in another namespace needs a ReferenceGrant there.
	//
	// +optional
	Namespace Namespace `json:"namespace,omitempty"`
}
