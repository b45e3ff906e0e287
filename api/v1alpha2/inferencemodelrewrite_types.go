package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InferenceModelRewrite rewrites the model a request asks for before the
// request reaches a model server of its InferencePool: a rule matches the
// requested model name and names the models to send the request to instead,
// with weights, for instance to canary a new version of a LoRA adapter.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Inference Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InferenceModelRewrite struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InferenceModelRewriteSpec   `json:"spec,omitempty"`
	Status InferenceModelRewriteStatus `json:"status,omitempty"`
}

// InferenceModelRewriteList is a list of InferenceModelRewrites.
//
// +kubebuilder:object:root=true
type InferenceModelRewriteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceModelRewrite `json:"items"`
}

// InferenceModelRewriteSpec is the pool the rewrite applies to and its rules.
type InferenceModelRewriteSpec struct {
	// PoolRef names the InferencePool, in the rewrite's namespace, whose
	// requests are rewritten.
	//
	// +kubebuilder:validation:Required
	PoolRef *PoolObjectReference `json:"poolRef"`

	// Rules are tried in order for each request. When several rewrites of a
	// pool have a rule for a model, a rule naming the model exactly wins
	// over a rule without matches (which matches every model); among equal
	// rules the rewrite created first wins, and within one rewrite the
	// first rule in the list.
	//
	// +required
	// +kubebuilder:validation:MaxItems=1000
	Rules []InferenceModelRewriteRule `json:"rules"`
}

// InferenceModelRewriteRule matches requests and says where to send them.
type InferenceModelRewriteRule struct {
	// Matches select the requests of the rule: a request matches when any
	// one of them does. A rule without matches matches every request.
	//
	// +optional
	Matches []Match `json:"matches,omitempty"`

	// Targets are the models a matched request is sent to, one per
	// request, chosen by weight. Either every target has a weight or none
	// has.
	//
	// +optional
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=100
	// +kubebuilder:validation:XValidation:rule="self.all(t, has(t.weight)) || self.all(t, !has(t.weight))",message="either every target of a rule has a weight or none has"
	Targets []TargetModel `json:"targets,omitempty"`
}

// TargetModel is one model a rule sends requests to, with its share.
type TargetModel struct {
	// Weight is the target's share of the rule's requests: its weight over
	// the sum of the rule's weights. Weights are relative, not percentages.
	// Either every target of a rule has a weight or none has, and then the
	// targets share the requests equally.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	Weight int32 `json:"weight,omitempty"`

	// ModelRewrite is the model name written into the request's "model"
	// field.
	//
	// +required
	ModelRewrite string `json:"modelRewrite"`
}

// Match is one criterion a request can meet.
type Match struct {
	// Model matches the "model" field of the request body.
	//
	// +required
	Model *ModelMatch `json:"model,omitempty"`
}

// ModelMatch compares the requested model name with a value.
type ModelMatch struct {
	// Type is how the name is compared; only "Exact" is supported.
	//
	// +optional
	// +kubebuilder:default=Exact
	Type *MatchValidationType `json:"type,omitempty"`

	// Value is the model name to compare with.
	//
	// +required
	// +kubebuilder:validation:MinLength=1
	Value string `json:"value"`
}

// MatchValidationType is a way of comparing model names.
//
// +kubebuilder:validation:Enum=Exact
type MatchValidationType string

// MatchExact matches a model name equal to the value.
const MatchExact MatchValidationType = "Exact"

// InferenceModelRewriteStatus is the observed state of a rewrite.
type InferenceModelRewriteStatus struct {
	// Conditions of the rewrite; the known type is "Accepted".
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:default={{type: "Accepted", status: "Unknown", reason:"Pending", message:"Waiting for controller", lastTransitionTime: "1970-01-01T00:00:00Z"}}
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InferenceModelRewriteConditionType is a type of condition of a rewrite.
type InferenceModelRewriteConditionType string

// InferenceModelRewriteConditionReason is a reason of a rewrite condition.
type InferenceModelRewriteConditionReason string

const (
	// RewriteConditionAccepted says whether the rewrite's rules are applied
	// to the requests of its pool.
	RewriteConditionAccepted InferenceModelRewriteConditionType = "Accepted"
	// RewriteReasonAccepted means the rules are applied.
	RewriteReasonAccepted InferenceModelRewriteConditionReason = "Accepted"
	// RewriteReasonPending means no controller has looked at the rewrite yet.
	RewriteReasonPending InferenceModelRewriteConditionReason = "Pending"
	// RewriteReasonInvalid means a rule breaks a constraint of the API that
	// the CRD in the cluster did not check (one older than the picker's):
	// the rules are not applied.
	RewriteReasonInvalid InferenceModelRewriteConditionReason = "Invalid"
)
