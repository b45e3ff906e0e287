package v1alpha2

// Group is an API group name; empty means the core group.
//
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type Group string

// Kind is an API kind in CamelCase.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`
type Kind string

// ObjectName is the name of an object.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
type ObjectName string

// PoolObjectReference names an InferencePool in the referrer's namespace.
type PoolObjectReference struct {
	// Group of the pool.
	//
	// +optional
	// +kubebuilder:default="inference.networking.k8s.io"
	Group Group `json:"group,omitempty"`

	// Kind of the pool.
	//
	// +optional
	// +kubebuilder:default="InferencePool"
	Kind Kind `json:"kind,omitempty"`

	// Name of the pool.
	//
	// +kubebuilder:validation:Required
	Name ObjectName `json:"name"`
}
