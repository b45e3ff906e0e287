package e2e

import (
	"context"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"k8s.io/utils/ptr"

	"github.com/inferpick/inferpick/test/framework"
)

// podWrapper builds model-server Pods: makePod(ns, name).Label(k, v).Obj().
type podWrapper = framework.PodWrapper

// makePod returns a Pod with one vLLM-like container and no labels.
func makePod(namespace, name string) *podWrapper {
	return framework.MakePod(namespace, name).Labels(map[string]string{}).Image("vllm/vllm-openai:latest")
}

// createReadyPod creates pod and then writes the status a kubelet would once
// its container is up and ready at ip.
func createReadyPod(ctx context.Context, pod *corev1.Pod, ip string) *corev1.Pod {
	GinkgoHelper()
	Expect(suite.client.Create(ctx, pod)).To(Succeed())
	framework.SetReady(pod, ip)
	Expect(suite.client.Status().Update(ctx, pod)).To(Succeed())
	return pod
}

// serviceAccountConfig returns a REST config that authenticates as the
// ServiceAccount with a token from the TokenRequest API, as a projected token
// in the Pod would.
func serviceAccountConfig(ctx context.Context, namespace, name string) *rest.Config {
	GinkgoHelper()
	tr, err := suite.clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}},
		metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred(), "TokenRequest for %s/%s", namespace, name)
	return &rest.Config{
		Host:            suite.cfg.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: suite.cfg.CAData},
		BearerToken:     tr.Status.Token,
	}
}

// writeKubeconfig writes cfg as a kubeconfig file for a process to use.
func writeKubeconfig(cfg *rest.Config, name string) string {
	GinkgoHelper()
	kc := clientcmdapi.NewConfig()
	kc.Clusters["e2e"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "e2e", AuthInfo: name}
	kc.CurrentContext = name
	path := filepath.Join(suite.tmp, name+".kubeconfig")
	Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())
	Expect(os.Chmod(path, 0o600)).To(Succeed())
	return path
}

// access is one question for a SelfSubjectAccessReview: may the caller do
// verb on resource in namespace ("" for all namespaces)?
type access struct {
	verb, group, resource, namespace, subresource string
}

// canI asks the API server what the caller of cs may do.
func canI(ctx context.Context, cs kubernetes.Interface, a access) bool {
	GinkgoHelper()
	review, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
		Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: a.verb, Group: a.group, Resource: a.resource, Namespace: a.namespace, Subresource: a.subresource,
		}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return review.Status.Allowed
}
