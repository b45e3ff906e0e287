package v1alpha2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

// GroupName is the API group of the InferenceObjective and the
// InferenceModelRewrite.
const GroupName = "inference.networking.x-k8s.io"

var (
	// GroupVersion is the group and version of the types in this package.
	GroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha2"}

	// SchemeBuilder registers the types of this package with a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion} //nolint:staticcheck // SA1019: the kubebuilder layout for API packages; importers already depend on controller-runtime

	// AddToScheme adds the types of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func init() {
	SchemeBuilder.Register(&InferenceObjective{}, &InferenceObjectiveList{}, &InferenceModelRewrite{}, &InferenceModelRewriteList{})
}
