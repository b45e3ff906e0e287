package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// InferenceObjective names a class of requests of one InferencePool and
// says how important they are. Requests carry the objective's name in the
// x-gateway-inference-objective header.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:storageversion
// +kubebuilder:printcolumn:name="Inference Pool",type=string,JSONPath=`.spec.poolRef.name`
// +kubebuilder:printcolumn:name="Priority",type=string,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type InferenceObjective struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   InferenceObjectiveSpec   `json:"spec,omitempty"`
	Status InferenceObjectiveStatus `json:"status,omitempty"`
}

// InferenceObjectiveList is a list of InferenceObjectives.
//
// +kubebuilder:object:root=true
type InferenceObjectiveList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []InferenceObjective `json:"items"`
}

// InferenceObjectiveSpec is what the objective asks of its pool.
type InferenceObjectiveSpec struct {
	// Priority orders requests when they have to wait: a higher value is
	// served first, negative values are allowed, and an unset value counts
	// as 0. Fairness applies only among requests of equal priority.
	//
	// +optional
	Priority *int `json:"priority,omitempty"`

	// PoolRef names the InferencePool, in the objective's namespace, that
	// serves these requests.
	//
	// +kubebuilder:validation:Required
	PoolRef PoolObjectReference `json:"poolRef"`
}

// InferenceObjectiveStatus is the observed state of an InferenceObjective.
type InferenceObjectiveStatus struct {
	// Conditions of the objective; the known type is "Accepted".
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:default={{type: "Ready", status: "Unknown", reason:"Pending", message:"Waiting for controller", lastTransitionTime: "1970-01-01T00:00:00Z"}}
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// InferenceObjectiveConditionType is a type of condition of an objective.
type InferenceObjectiveConditionType string

// InferenceObjectiveConditionReason is a reason of an objective condition.
type InferenceObjectiveConditionReason string

const (
	// ObjectiveConditionAccepted says whether the objective was accepted.
	ObjectiveConditionAccepted InferenceObjectiveConditionType = "Accepted"
	// ObjectiveReasonAccepted means the objective is accepted.
	ObjectiveReasonAccepted InferenceObjectiveConditionReason = "Accepted"
	// ObjectiveReasonPending means no controller has looked at the objective yet.
	ObjectiveReasonPending InferenceObjectiveConditionReason = "Pending"
)
