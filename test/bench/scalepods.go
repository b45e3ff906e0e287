package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferpick/inferpick/test/framework"
)

// scalePort is the pool's target port. Nothing listens there: the picker
// runs with scraping slowed to once an hour, so only the controllers work.
const scalePort = 8000

// podFleet writes pods the way a kubelet-less cluster would see them:
// created, then given a Ready status with an IP through the status
// subresource. It counts every write, each of which is one watch event for
// the picker.
type podFleet struct {
	c      client.Client
	ns     string
	mu     sync.Mutex
	pods   map[string]*corev1.Pod // by name: the last written object
	events atomic.Int64
}

func newPodFleet(c client.Client, ns string) *podFleet {
	return &podFleet{c: c, ns: ns, pods: map[string]*corev1.Pod{}}
}

// podIP is the address of pod i of generation gen: 127.gen.x.y.
func podIP(gen, i int) string {
	return netip.AddrFrom4([4]byte{127, byte(gen), byte(i >> 8), byte(i)}).String()
}

// podName is the name of pod i of generation gen.
func podName(gen, i int) string { return "vllm-" + strconv.Itoa(gen) + "-" + strconv.Itoa(i) }

// start creates a pod and reports it Ready at ip: two events.
func (f *podFleet) start(ctx context.Context, name, ip string) error {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: f.ns, Name: name, Labels: map[string]string{"app": "vllm"}},
		// No node: a pod that was never scheduled is deleted at once, with
		// no kubelet to wait for.
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "vllm", Image: "vllm/vllm-openai",
			Ports: []corev1.ContainerPort{{ContainerPort: scalePort}}}}},
	}
	if err := f.c.Create(ctx, pod); err != nil {
		return fmt.Errorf("create pod %s: %w", name, err)
	}
	f.events.Add(1)
	setPodStatus(pod, ip, corev1.ConditionTrue)
	if err := f.c.Status().Update(ctx, pod); err != nil {
		return fmt.Errorf("ready pod %s: %w", name, err)
	}
	f.events.Add(1)
	f.mu.Lock()
	f.pods[name] = pod
	f.mu.Unlock()
	return nil
}

// stop deletes a pod: one event.
func (f *podFleet) stop(ctx context.Context, name string) error {
	f.mu.Lock()
	pod := f.pods[name]
	delete(f.pods, name)
	f.mu.Unlock()
	if pod == nil {
		return fmt.Errorf("delete pod %s: not in the fleet", name)
	}
	if err := f.c.Delete(ctx, pod); err != nil {
		return fmt.Errorf("delete pod %s: %w", name, err)
	}
	f.events.Add(1)
	return nil
}

// flip turns a random pod's readiness over: one event.
func (f *podFleet) flip(ctx context.Context, rng *rand.Rand) error {
	f.mu.Lock()
	var pod *corev1.Pod
	n := rng.IntN(len(f.pods))
	for _, p := range f.pods {
		if n == 0 {
			pod = p
			break
		}
		n--
	}
	delete(f.pods, pod.Name) // no concurrent flip of the same pod
	f.mu.Unlock()
	status := corev1.ConditionFalse
	if !framework.PodReady(pod) {
		status = corev1.ConditionTrue
	}
	setPodStatus(pod, pod.Status.PodIP, status)
	err := f.c.Status().Update(ctx, pod)
	f.mu.Lock()
	f.pods[pod.Name] = pod
	f.mu.Unlock()
	if err != nil {
		return fmt.Errorf("flip pod %s: %w", pod.Name, err)
	}
	f.events.Add(1)
	return nil
}

// ready returns the number of pods last reported Ready.
func (f *podFleet) ready() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, p := range f.pods {
		if framework.PodReady(p) {
			n++
		}
	}
	return n
}

func setPodStatus(pod *corev1.Pod, ip string, ready corev1.ConditionStatus) {
	now := metav1.Now()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.ContainersReady, Status: ready, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: ready, LastTransitionTime: now},
	}
}

// parallel runs do(i) for i in [0, n) on workers goroutines and returns the
// first error.
func parallel(ctx context.Context, n, workers int, do func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		once  sync.Once
		first error
		wg    sync.WaitGroup
	)
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := do(ctx, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	return first
}
