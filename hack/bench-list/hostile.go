package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/internal/harness/hostile"
)

// hostilePod is a bench pod, annotated for scraping like any inference
// server, that serves the given kind of misbehaviour.
func hostilePod(ns, kind string, i int) *corev1.Pod {
	p := benchPod(ns, i)
	p.Name = fmt.Sprintf("%s-%04d", kind, i)
	p.Labels["hostile"] = kind
	return p
}

// firstRound is the first round's hostile kinds as the bench serves them:
// redirects to a closed port, gzip bombs of 256 MiB.
func firstRound() ([]hostile.Kind, error) { return hostile.Kinds("http://127.0.0.1:1/", 256<<20) }

// createHostile creates perKind pods of every kind in ns, waits for them
// to be Ready, and serves each kind's misbehaviour on its pod IPs.
func (b *bench) createHostile(ctx context.Context, ns string, kinds []hostile.Kind, perKind int) error {
	plan := make([]string, 0, perKind*len(kinds))
	for _, k := range kinds {
		for range perKind {
			plan = append(plan, k.Name)
		}
	}
	return b.createPlanned(ctx, ns, plan)
}

// createPlanned creates a pod of kind plan[i] for each i in ns, waits for
// them to be Ready, and serves each pod's kind on its pod IP from pod
// servers (podserver.go), which build the kinds by name.
func (b *bench) createPlanned(ctx context.Context, ns string, plan []string) error {
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	for i, kind := range plan {
		if _, err := b.client.CoreV1().Pods(ns).Create(ctx, hostilePod(ns, kind, i), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	pods, err := b.waitReady(ctx, ns, len(plan))
	if err != nil {
		return err
	}
	served := make([]servedPod, len(pods))
	for i, p := range pods {
		served[i] = servedPod{Addr: podAddr(p.Status.PodIP), Index: i, Kind: p.Labels["hostile"]}
	}
	return b.servePods(ctx, served)
}

// tenantPlan is what one tenant namespace of n pods serves: four pods of
// each kind at the per-scrape limits, and the rest, in turn, the most an
// inference server, a router and a server of in-range capacity inputs may
// keep (hostile.TenantKinds).
func tenantPlan(n int) []string {
	bombs := []string{"model-names", "router-names", "router-most-models", "histogram-buckets"}
	kept := []string{"names-kept", "router-kept", "capacity-inputs"}
	plan := make([]string, n)
	for i := range plan {
		plan[i] = kept[i%len(kept)]
		if i < 4*len(bombs) {
			plan[i] = bombs[i%len(bombs)]
		}
	}
	return plan
}

// floodSelectors asks for gpu_utilization of ns's pods with n distinct
// label selectors, each matching every pod, eight at a time, as a reader
// filling the adapter's caches of Ready pods would; the pods report no GPU
// values, so each answer is small and the cost is the adapter's.
func (b *bench) floodSelectors(ctx context.Context, ns string, n int) (time.Duration, error) {
	start := time.Now()
	next := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				_, err := b.client.CoreV1().RESTClient().Get().
					AbsPath("/apis/custom.metrics.k8s.io/v1beta2/namespaces", ns, "pods", "*", "gpu_utilization").
					Param("labelSelector", fmt.Sprintf("app=%s,flood notin (v%d)", appLabel, i)).DoRaw(ctx)
				if err != nil && !apierrors.IsNotFound(err) {
					errs <- fmt.Errorf("selector %d: %w", i, err)
					return
				}
			}
		})
	}
	var err error
	for i := 0; i < n && err == nil; i++ {
		select {
		case next <- i:
		case err = <-errs:
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	return time.Since(start), errors.Join(err, <-errs)
}

// capacityRead times one read of a model's inference_capacity_utilization
// in ns; no value (NotFound) is an answer too.
func (b *bench) capacityRead(ctx context.Context, ns, model string) (time.Duration, error) {
	start := time.Now()
	_, err := b.client.CoreV1().RESTClient().Get().
		AbsPath("/apis/external.metrics.k8s.io/v1beta1/namespaces", ns, "inference_capacity_utilization").
		Param("labelSelector", "model_name="+model).DoRaw(ctx)
	if err != nil && !apierrors.IsNotFound(err) {
		return 0, fmt.Errorf("capacity of %s in %s: %w", model, ns, err)
	}
	return time.Since(start), nil
}
