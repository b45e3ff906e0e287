package v1

// InferencePoolConditionType is the type of a condition a parent reports on
// a pool.
type InferencePoolConditionType string

// InferencePoolReason is the reason of a condition a parent reports on a pool.
type InferencePoolReason string

// The Accepted condition: whether a parent takes the pool as a backend.
const (
	// InferencePoolConditionAccepted says whether the parent accepted the pool.
	InferencePoolConditionAccepted InferencePoolConditionType = "Accepted"

	// InferencePoolReasonAccepted: the parent supports pools as backends
	// and accepted this one.
	InferencePoolReasonAccepted InferencePoolReason = "Accepted"
	// InferencePoolReasonNotSupportedByParent: the parent cannot use a pool
	// as a backend.
	InferencePoolReasonNotSupportedByParent InferencePoolReason = "NotSupportedByParent"
	// InferencePoolReasonHTTPRouteNotAccepted: the route that refers to the
	// pool was rejected by the parent; its own status says why.
	InferencePoolReasonHTTPRouteNotAccepted InferencePoolReason = "HTTPRouteNotAccepted"
	// InferencePoolReasonEndpointPickerRefMissing: the pool has no
	// endpointPickerRef and the parent needs one.
	InferencePoolReasonEndpointPickerRefMissing InferencePoolReason = "EndpointPickerRefMissing"
)

// The ResolvedRefs condition: whether the parent resolved the pool's
// references.
const (
	// InferencePoolConditionResolvedRefs says whether every reference of the
	// pool resolved.
	InferencePoolConditionResolvedRefs InferencePoolConditionType = "ResolvedRefs"

	// InferencePoolReasonResolvedRefs: every reference resolved.
	InferencePoolReasonResolvedRefs InferencePoolReason = "ResolvedRefs"
	// InferencePoolReasonInvalidExtensionRef: the endpoint picker reference
	// has an unsupported group or kind, or names an object that is missing.
	InferencePoolReasonInvalidExtensionRef InferencePoolReason = "InvalidExtensionRef"
)

// The Exported condition: whether the pool was exported to other clusters.
const (
	// InferencePoolConditionExported says whether the controller exported
	// the pool to the clusters it was asked to.
	InferencePoolConditionExported InferencePoolConditionType = "Exported"

	// InferencePoolReasonExported: the pool was exported.
	InferencePoolReasonExported InferencePoolReason = "Exported"
	// InferencePoolReasonNotRequested: no export was asked for.
	InferencePoolReasonNotRequested InferencePoolReason = "NotRequested"
	// InferencePoolReasonNotSupported: an export was asked for but the
	// implementation cannot export; the message says more.
	InferencePoolReasonNotSupported InferencePoolReason = "NotSupported"
)
