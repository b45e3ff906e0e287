package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
)

// ReasonCRDMissing is the reason of the Event on the picker's own Pod when
// the InferencePool CRD is not installed.
const ReasonCRDMissing = "InferencePoolCRDMissing"

// ErrCRDMissing explains what to do when the InferencePool CRD is not
// installed.
var ErrCRDMissing = fmt.Errorf("the InferencePool CRD (%s, resource inferencepools) is not installed: "+
	"install it with the chart (helm installs charts/inferpick/crds) or `kubectl apply -f charts/inferpick/crds/`, then restart the picker",
	inferencev1.GroupVersion)

// CheckCRD asks the API server's discovery whether the InferencePool CRD is
// served, and returns ErrCRDMissing when it is not.
func CheckCRD(cfg *rest.Config) error {
	return CheckServed(cfg, inferencev1.GroupVersion, "inferencepools")
}

// CheckServed returns ErrCRDMissing unless the API server serves resource
// in gv.
func CheckServed(cfg *rest.Config, gv schema.GroupVersion, resource string) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	list, err := dc.ServerResourcesForGroupVersion(gv.String())
	switch {
	case apierrors.IsNotFound(err):
		return ErrCRDMissing
	case err != nil:
		return fmt.Errorf("discover %s: %w", gv, err)
	}
	for i := range list.APIResources {
		if list.APIResources[i].Name == resource {
			return nil
		}
	}
	return ErrCRDMissing
}

// RecordOnSelf writes a Warning Event on the picker's own Pod directly, for
// failures that stop the picker before its event recorder runs.
func RecordOnSelf(ctx context.Context, c client.Client, self *corev1.ObjectReference, reason, message string) error {
	if self == nil {
		return nil
	}
	now := metav1.Now()
	ev := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: self.Name + ".", Namespace: self.Namespace},
		InvolvedObject: *self,
		Reason:         reason,
		Message:        message,
		Type:           corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: Name},
		FirstTimestamp: now,
		LastTimestamp:  now,
		Count:          1,
	}
	if err := c.Create(ctx, ev); err != nil {
		return fmt.Errorf("record %s on %s/%s: %w", reason, self.Namespace, self.Name, err)
	}
	return nil
}
