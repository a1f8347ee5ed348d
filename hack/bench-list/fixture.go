package main

// The namespace a run measures: its pods, Ready, and their servers, served
// in full by the adapter.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gpuscale/gpuscale/internal/harness/localcluster"
	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
)

// createPods creates n bench pods in ns, 32 at a time (scraped unless the
// bench was asked for unscraped pods).
func (b *bench) createPods(ctx context.Context, ns string, n int) error {
	names := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				pod := benchPod(ns, i)
				if b.unscraped {
					pod.Annotations = nil
				}
				if _, err := b.client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case names <- i:
		case err = <-errs:
		}
	}
	close(names)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

func benchPod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("llm-%05d", i), Namespace: ns,
			Labels: map[string]string{"app": appLabel},
			Annotations: map[string]string{discovery.AnnotationScrape: "true",
				discovery.AnnotationPort: strconv.Itoa(metricsPort)},
		},
		Spec: corev1.PodSpec{
			// Placed directly, as the scheduler would: kwok does not limit
			// a node's pods.
			NodeName:    node,
			Tolerations: []corev1.Toleration{localcluster.GPUToleration()},
			Containers:  []corev1.Container{{Name: "server", Image: image}},
		},
	}
}

// waitReady waits until n pods of ns are Ready with an IP and returns them.
func (b *bench) waitReady(ctx context.Context, ns string, n int) ([]corev1.Pod, error) {
	var ready []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		list, err := b.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		ready = ready[:0]
		for _, p := range list.Items {
			if p.Status.PodIP != "" && isReady(&p) {
				ready = append(ready, p)
			}
		}
		return len(ready) == n, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%d of %d pods Ready: %w", len(ready), n, err)
	}
	return ready, nil
}

func isReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// serve answers every pod's scrapes with a vLLM exposition: gauges fixed
// per pod, a TTFT histogram whose counts grow with time, so that TTFT
// quantiles have an increase to work on, and the rest of a real vLLM's
// families (inferencesim.BenchPodHandler), from pod servers.
func (b *bench) serve(ctx context.Context, pods []corev1.Pod) error {
	served := make([]servedPod, len(pods))
	for i := range pods {
		served[i] = servedPod{Addr: podAddr(pods[i].Status.PodIP), Index: i}
	}
	return b.servePods(ctx, served)
}

// waitFull waits until the list of the pods sel selects names all n.
func (b *bench) waitFull(ctx context.Context, ns, metric, sel string, n int) error {
	got := 0
	err := wait.PollUntilContextTimeout(ctx, 2*time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := b.list(ctx, ns, metric, sel)
		if err != nil {
			return false, nil // NotFound until the first scrape lands
		}
		var l struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(body, &l); err != nil {
			return false, err
		}
		got = len(l.Items)
		return got == n, nil
	})
	if err != nil {
		return fmt.Errorf("list of %s names %d of %d pods: %w", metric, got, n, err)
	}
	return nil
}
