package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// kwokNodeLabel marks the fake nodes kwok manages.
const kwokNodeLabel = "inferpick.dev/kwok"

// startCluster turns the suite's API server into a small cluster for the
// current container: kube-controller-manager (Deployments and ReplicaSets),
// kube-scheduler, and kwok standing in for the kubelet of one fake node. The
// binaries come from `hack/controlplane.sh cluster`, next to the API server.
func startCluster(ctx context.Context) {
	GinkgoHelper()
	assets := os.Getenv("KUBEBUILDER_ASSETS")
	for _, b := range []string{"kube-controller-manager", "kube-scheduler", "kwok"} {
		Expect(filepath.Join(assets, b)).To(BeAnExistingFile(),
			"%s is built by `hack/controlplane.sh cluster` (make test-e2e runs it)", b)
	}

	By("starting kube-controller-manager, kube-scheduler and kwok")
	start("kube-controller-manager", filepath.Join(assets, "kube-controller-manager"), nil,
		"--kubeconfig="+suite.kubeconfig,
		"--authentication-kubeconfig="+suite.kubeconfig,
		"--authorization-kubeconfig="+suite.kubeconfig,
		"--leader-elect=false",
		"--controllers=deployment-controller,replicaset-controller",
		"--secure-port=0",
	)
	start("kube-scheduler", filepath.Join(assets, "kube-scheduler"), nil,
		"--kubeconfig="+suite.kubeconfig,
		"--authentication-kubeconfig="+suite.kubeconfig,
		"--authorization-kubeconfig="+suite.kubeconfig,
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(freePort()),
		"--v=2",
	)
	start("kwok", filepath.Join(assets, "kwok"), nil,
		"--kubeconfig="+suite.kubeconfig,
		"--config="+absPath("testdata/kwok-stages.yaml"),
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector="+kwokNodeLabel+"=true",
		"--server-address=127.0.0.1:"+strconv.Itoa(freePort()),
	)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:   fmt.Sprintf("kwok-%d", GinkgoParallelProcess()),
		Labels: map[string]string{kwokNodeLabel: "true", corev1.LabelHostname: "kwok"},
	}}
	Expect(suite.client.Create(ctx, node)).To(Succeed())
	DeferCleanup(func(ctx SpecContext) { //nolint:contextcheck // a cleanup runs after the container's context ends and gets its own from Ginkgo.
		Expect(suite.client.Delete(ctx, node)).To(Succeed())
	}, NodeTimeout(time.Minute))
	By("waiting for kwok to report the node Ready")
	Eventually(func(g Gomega) {
		g.Expect(suite.client.Get(ctx, client.ObjectKeyFromObject(node), node)).To(Succeed())
		g.Expect(node.Status.Conditions).To(ContainElement(And(
			HaveField("Type", corev1.NodeReady), HaveField("Status", corev1.ConditionTrue))))
	}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	// The API server taints a new node not-ready (TaintNodesByCondition); the
	// node lifecycle controller lifts the taint once the node is Ready. That
	// controller would also want kubelet heartbeats, so it does not run here
	// and the suite lifts the taint instead.
	Eventually(func() error {
		if err := suite.client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		node.Spec.Taints = nil
		return suite.client.Update(ctx, node)
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
}
