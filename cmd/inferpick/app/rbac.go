package app

// The metrics endpoint authenticates its callers with TokenReviews and
// authorizes them with SubjectAccessReviews (--metrics-endpoint-auth);
// `make manifests` turns these markers into the ClusterRole in
// config/rbac/role.yaml.

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
