package v1

// Group is the API group of a referenced object: empty for the core group,
// otherwise a DNS subdomain such as "gateway.networking.k8s.io".
//
// +kubebuilder:validation:MinLength=0
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^$|^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type Group string

// Kind is the kind of a referenced object, such as "Service" or "Gateway".
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$`
type Kind string

// ObjectName is the name of a referenced object.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
type ObjectName string

// Namespace is the name of a namespace: a DNS label.
//
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
type Namespace string

// PortNumber is a TCP port, 1 to 65535.
//
// +kubebuilder:validation:Minimum=1
// +kubebuilder:validation:Maximum=65535
type PortNumber int32

// LabelKey is a label key: an optional DNS-subdomain prefix and a slash,
// then a name of at most 63 characters that starts and ends with an
// alphanumeric character. Keys are case sensitive.
//
// The API server cannot check map keys against a schema, so a pool with an
// invalid key is accepted; the picker reports it and selects nothing.
//
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$`
type LabelKey string

// LabelValue is a label value: empty, or at most 63 characters of
// alphanumerics, '-', '_' and '.', starting and ending with an alphanumeric.
//
// +kubebuilder:validation:MinLength=0
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$`
type LabelValue string

// LabelSelector picks Pods by equality on their labels. It is deliberately
// as plain as a Service selector, so a gateway may translate a pool into a
// Service.
type LabelSelector struct {
	// MatchLabels are the labels a Pod must carry, every one of them, with
	// exactly these values.
	//
	// +required
	// +kubebuilder:validation:MinProperties=1
	// +kubebuilder:validation:MaxProperties=64
	MatchLabels map[LabelKey]LabelValue `json:"matchLabels,omitempty"`
}
