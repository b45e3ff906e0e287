package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inferencev1 "github.com/inferpick/inferpick/api/v1"
	"github.com/inferpick/inferpick/test/framework"
)

// The chart's Deployment rolled out by a real kube-controller-manager: pods
// scheduled by kube-scheduler onto a kwok node, one picker process per pod,
// readiness from each picker's gRPC health service.
var _ = Describe("helm upgrade on a cluster", Ordered, func() {
	BeforeAll(func(ctx SpecContext) {
		startCluster(ctx)
	}, NodeTimeout(2*time.Minute))

	DescribeTable("rolls the pickers out to the new pod template",
		func(ctx SpecContext, haMode string, replicas, wantReady int, sets ...string) {
			ns := fmt.Sprintf("rollout-%06d", rand.IntN(1_000_000))
			values := filepath.Join(suite.tmp, ns+".yaml")
			Expect(os.WriteFile(values, fmt.Appendf(nil, "replicas: %d\nhaMode: %s\npool:\n  selector:\n    matchLabels:\n      app: vllm\n", replicas, haMode), 0o644)).To(Succeed())

			By(fmt.Sprintf("helm install with %d replicas, %s", replicas, haMode))
			var setArgs []string
			for _, s := range sets {
				setArgs = append(setArgs, "--set", s)
			}
			run(ctx, suite.helm, append([]string{"install", release, suite.chart, "--namespace", ns, "--create-namespace", "--values", values}, setArgs...)...)
			k := &kubelet{
				namespace:  ns,
				kubeconfig: writeKubeconfig(serviceAccountConfig(ctx, ns, fullname), "picker-"+ns),
				pickers:    map[types.UID]*pickerProcess{},
			}
			DeferCleanup(k.stopAll)
			first := waitRolledOut(ctx, k, replicas, wantReady)

			pool := &inferencev1.InferencePool{}
			Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: poolName}, pool)).To(Succeed())
			Expect(pool.Spec.EndpointPickerRef.FailureMode).To(Equal(inferencev1.EndpointPickerFailOpen), "a new pool fails open")
			By("setting the pool's failure mode outside the chart, as an earlier release of another chart would have")
			patch := client.MergeFrom(pool.DeepCopy())
			pool.Spec.EndpointPickerRef.FailureMode = inferencev1.EndpointPickerFailClose
			Expect(suite.client.Patch(ctx, pool, patch)).To(Succeed())

			By("helm upgrade changing a value of the pod template")
			run(ctx, suite.helm, append([]string{"upgrade", release, suite.chart, "--namespace", ns, "--values", values,
				"--set", "picker.verbosity=2"}, setArgs...)...)
			second := waitRolledOut(ctx, k, replicas, wantReady)
			Expect(second).NotTo(Equal(first), "the upgrade made a new ReplicaSet")
			Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: ns, Name: poolName}, pool)).To(Succeed())
			Expect(pool.Spec.EndpointPickerRef.FailureMode).To(Equal(inferencev1.EndpointPickerFailClose),
				"the upgrade keeps the pool's failure mode when the values set none")
		},
		Entry("one replica: surge-first rolling update", NodeTimeout(5*time.Minute), "active-active", 1, 1),
		// Active-active (the default): every replica is ready, so the
		// surge-first rolling update replaces them one by one.
		Entry("three active-active replicas: surge-first rolling update, all ready", NodeTimeout(5*time.Minute), "active-active", 3, 3),
		// Active-passive: every replica runs, only the elected one is ready.
		// Under a rolling update the new standbys never become ready and the
		// old ReplicaSet is never scaled down; the chart uses Recreate.
		Entry("three active-passive replicas: Recreate, only the leader ready", NodeTimeout(5*time.Minute), "active-passive", 3, 1),
		// A rolling update replaces the leader only when it may take every
		// old pod down: the new standbys never become ready to stand in for it.
		Entry("three active-passive replicas: a rolling update that may take all three down", NodeTimeout(5*time.Minute), "active-passive", 3, 1,
			"strategy.type=RollingUpdate", "strategy.rollingUpdate.maxUnavailable=3"),
	)
})

// waitRolledOut waits until the Deployment's newest ReplicaSet owns every
// pod, there are exactly replicas of them, Running and not terminating, and
// exactly wantReady are ready. It returns that ReplicaSet's pod-template-hash.
func waitRolledOut(ctx context.Context, k *kubelet, replicas, wantReady int) string {
	GinkgoHelper()
	var hash string
	Eventually(func(g Gomega) {
		g.Expect(k.sync(ctx)).To(Succeed())
		var dep appsv1.Deployment
		g.Expect(suite.client.Get(ctx, types.NamespacedName{Namespace: k.namespace, Name: fullname}, &dep)).To(Succeed())
		g.Expect(dep.Status.ObservedGeneration).To(Equal(dep.Generation))
		revision := dep.Annotations["deployment.kubernetes.io/revision"]
		var sets appsv1.ReplicaSetList
		g.Expect(suite.client.List(ctx, &sets, client.InNamespace(k.namespace))).To(Succeed())
		hash = ""
		for i := range sets.Items {
			rs := &sets.Items[i]
			if rs.Annotations["deployment.kubernetes.io/revision"] == revision {
				hash = rs.Labels[appsv1.DefaultDeploymentUniqueLabelKey]
			} else {
				g.Expect(rs.Spec.Replicas).To(HaveValue(BeZero()), "old ReplicaSet %s scaled down", rs.Name)
			}
		}
		g.Expect(hash).NotTo(BeEmpty(), "the ReplicaSet of revision %s", revision)

		pods := k.pods(ctx, g)
		g.Expect(pods).To(HaveLen(replicas))
		ready := 0
		for i := range pods {
			p := &pods[i]
			g.Expect(p.DeletionTimestamp).To(BeNil(), "pod %s terminating", p.Name)
			g.Expect(p.Labels).To(HaveKeyWithValue(appsv1.DefaultDeploymentUniqueLabelKey, hash), "pod %s of the new template", p.Name)
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s on node %q: %+v", p.Name, p.Spec.NodeName, p.Status.Conditions)
			if framework.PodReady(p) {
				ready++
			}
		}
		g.Expect(ready).To(Equal(wantReady), "ready pods")
		g.Expect(dep.Status.UpdatedReplicas).To(BeEquivalentTo(replicas))
		g.Expect(dep.Status.ReadyReplicas).To(BeEquivalentTo(wantReady))
	}).WithContext(ctx).WithTimeout(3 * time.Minute).WithPolling(250 * time.Millisecond).Should(Succeed())
	return hash
}

// kubelet plays what kwok leaves to the kubelet: it runs the picker of each
// Running pod as a local process, writes the picker's gRPC readiness into
// the pod's Ready condition as the probe would, and when a pod is deleted
// stops its picker (SIGTERM, then the drain) before removing the pod.
type kubelet struct {
	namespace  string
	kubeconfig string // the chart ServiceAccount's
	pickers    map[types.UID]*pickerProcess
}

// pods lists the picker pods of the namespace.
func (k *kubelet) pods(ctx context.Context, g Gomega) []corev1.Pod {
	var pods corev1.PodList
	g.Expect(suite.client.List(ctx, &pods, client.InNamespace(k.namespace),
		client.MatchingLabels{"app.kubernetes.io/component": "endpoint-picker"})).To(Succeed())
	return pods.Items
}

// sync does one pass over the namespace's picker pods.
func (k *kubelet) sync(ctx context.Context) error {
	var pods corev1.PodList
	if err := suite.client.List(ctx, &pods, client.InNamespace(k.namespace),
		client.MatchingLabels{"app.kubernetes.io/component": "endpoint-picker"}); err != nil {
		return err
	}
	seen := map[types.UID]bool{}
	for i := range pods.Items {
		pod := &pods.Items[i]
		seen[pod.UID] = true
		p := k.pickers[pod.UID]
		switch {
		case pod.DeletionTimestamp != nil:
			if p != nil {
				p.stop()
				delete(k.pickers, pod.UID)
			}
			err := suite.client.Delete(ctx, pod, client.GracePeriodSeconds(0), client.Preconditions{UID: &pod.UID})
			if client.IgnoreNotFound(err) != nil {
				return fmt.Errorf("remove pod %s: %w", pod.Name, err)
			}
		case p == nil:
			if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
				continue // kwok has not started it yet
			}
			k.pickers[pod.UID] = runPicker(ctx, k.namespace, pod.Spec, "inferpick-"+pod.Name, k.kubeconfig,
				[]string{"NAMESPACE=" + k.namespace, "POD_NAME=" + pod.Name, "POD_UID=" + string(pod.UID)})
		default:
			if done, err := p.exited(); done {
				return StopTrying(fmt.Sprintf("picker of %s exited: %v\n%s", pod.Name, err, p.output()))
			}
			st, err := p.health(ctx, "readiness")
			ready := err == nil && st == healthpb.HealthCheckResponse_SERVING
			if ready != framework.PodReady(pod) {
				if err := setReady(ctx, pod, ready); err != nil {
					return err
				}
			}
		}
	}
	for uid, p := range k.pickers {
		if !seen[uid] {
			p.stop()
			delete(k.pickers, uid)
		}
	}
	return nil
}

// stopAll stops every picker still running.
func (k *kubelet) stopAll() {
	for uid, p := range k.pickers {
		p.stop()
		delete(k.pickers, uid)
	}
}

// setReady writes the pod's readiness as the kubelet's status manager does.
func setReady(ctx context.Context, pod *corev1.Pod, ready bool) error {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	patch := client.MergeFrom(pod.DeepCopy())
	for i := range pod.Status.Conditions {
		c := &pod.Status.Conditions[i]
		if c.Type == corev1.PodReady || c.Type == corev1.ContainersReady {
			c.Status, c.LastTransitionTime = status, now
		}
	}
	for i := range pod.Status.ContainerStatuses {
		pod.Status.ContainerStatuses[i].Ready = ready
		pod.Status.ContainerStatuses[i].Started = ptr.To(true)
	}
	if err := suite.client.Status().Patch(ctx, pod, patch); err != nil {
		return fmt.Errorf("readiness of pod %s: %w", pod.Name, err)
	}
	return nil
}
