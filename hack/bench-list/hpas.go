package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/signal/histogram"
)

// hpaNamespace holds the HPA mode's Deployments and HPAs.
const hpaNamespace = "hpa-bench"

// hpaResult is what the HPA mode measured.
type hpaResult struct {
	HPAs       int
	SyncPeriod time.Duration
	Measured   time.Duration
	// ScrapingCPU is the adapter's CPU, in cores, before the HPAs
	// existed; WithHPAsCPU over the measured window once they had synced.
	ScrapingCPU, WithHPAsCPU float64
	// Requests is how many custom metrics requests the adapter served in
	// the window; APIp50 and APIp99 their latency as the adapter measured
	// it, and AggP99 as the kube-apiserver's aggregation layer did (0 when
	// it does not record proxied requests).
	Requests               float64
	APIp50, APIp99, AggP99 time.Duration
	// Reconciles is how many HPA syncs the controller finished in the
	// window. LagMean is the exact mean time an HPA waited in the
	// controller's queue once its sync was due, LagP99 the 99th
	// percentile interpolated in the queue's decade buckets, and
	// LagOver the syncs that waited longer than LagBound (the bucket
	// bound at or under one sync period).
	Reconciles                float64
	LagMean, LagP99, LagBound time.Duration
	LagOver                   float64
	// WorkP99 is the 99th percentile of one HPA's sync.
	WorkP99 time.Duration
	// Served is how many HPAs had read both metrics at the end.
	Served int
}

func (r hpaResult) line() string {
	return fmt.Sprintf("%d HPAs at a %v sync: adapter %.3f cores beyond scraping (%.3f scraping, %.3f with HPAs); %.0f metric requests, p50 %v p99 %v (aggregator p99 %v); %.0f reconciles, queue lag mean %v p99 %v, %.0f over %v; sync p99 %v; %d of %d HPAs reading both metrics",
		r.HPAs, r.SyncPeriod, r.WithHPAsCPU-r.ScrapingCPU, r.ScrapingCPU, r.WithHPAsCPU, r.Requests, r.APIp50, r.APIp99, r.AggP99,
		r.Reconciles, r.LagMean, r.LagP99, r.LagOver, r.LagBound, r.WorkP99, r.Served, r.HPAs)
}

func (r hpaResult) markdown() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "# %d HPAs on one adapter\n\nEach of %d Deployments (one Ready pod, scraped by the adapter) has one HPA with two metrics: `inference_capacity_utilization` (Object, the Deployment) and `inference_queue_depth` (Pods). The real HPA controller syncs every %v; measured over %v once every HPA had synced.\n\n", r.HPAs, r.HPAs, r.SyncPeriod, r.Measured)
	sb.WriteString("| adapter CPU beyond scraping | scraping | metric requests | p50 | p99 | aggregator p99 | reconciles | queue lag mean | queue lag p99 | over one sync | sync p99 | HPAs reading both |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	fmt.Fprintf(&sb, "| %.3f cores | %.3f cores | %.0f | %v | %v | %v | %.0f | %v | %v | %.0f (> %v) | %v | %d of %d |\n",
		r.WithHPAsCPU-r.ScrapingCPU, r.ScrapingCPU, r.Requests, r.APIp50, r.APIp99, r.AggP99, r.Reconciles, r.LagMean, r.LagP99, r.LagOver, r.LagBound, r.WorkP99, r.Served, r.HPAs)
	return sb.String()
}

// hpas creates n Deployments of one scraped pod each, and once the
// adapter serves them all and its scraping CPU is measured, one HPA on
// each; then it measures the adapter, the API and the HPA controller
// over measure.
func (b *bench) hpas(ctx context.Context, n int, sync, measure time.Duration) (hpaResult, error) {
	r := hpaResult{HPAs: n, SyncPeriod: sync, Measured: measure}
	if _, err := b.client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: hpaNamespace}}, metav1.CreateOptions{}); err != nil {
		return r, err
	}
	if err := b.parallel(ctx, n, func(ctx context.Context, i int) error {
		_, err := b.client.AppsV1().Deployments(hpaNamespace).Create(ctx, hpaDeployment(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, fmt.Errorf("deployments: %w", err)
	}
	pods, err := b.waitReady(ctx, hpaNamespace, n)
	if err != nil {
		return r, err
	}
	if err := b.serve(ctx, pods); err != nil {
		return r, err
	}
	if err := b.waitFull(ctx, hpaNamespace, "inference_queue_depth", "bench="+appLabel, n); err != nil {
		return r, err
	}
	pid := b.env.AdapterPID()
	b.log.Info("adapter serves every pod; measuring its scraping", "for", measure)
	if r.ScrapingCPU, err = cpuRate(ctx, pid, measure); err != nil {
		return r, err
	}
	if err := b.parallel(ctx, n, func(ctx context.Context, i int) error {
		_, err := b.client.AutoscalingV2().HorizontalPodAutoscalers(hpaNamespace).Create(ctx, benchHPA(i), metav1.CreateOptions{})
		return err
	}); err != nil {
		return r, fmt.Errorf("HPAs: %w", err)
	}
	// Two sync periods: every HPA has been reconciled at least once, and
	// the controller is in its steady rhythm.
	b.log.Info("HPAs created; letting them sync", "for", 2*sync)
	if err := sleep(ctx, 2*sync); err != nil {
		return r, err
	}
	kcm, err := b.kcmClient()
	if err != nil {
		return r, err
	}
	before, err := b.snapshot(ctx, kcm)
	if err != nil {
		return r, err
	}
	b.log.Info("measuring the HPAs", "for", measure)
	// A CPU profile of the first half says where the requests' CPU goes.
	profile := make(chan error, 1)
	go func() { profile <- b.saveProfile(ctx, "cpu-hpas.pb.gz", measure/2) }()
	if r.WithHPAsCPU, err = cpuRate(ctx, pid, measure); err != nil {
		return r, errors.Join(err, <-profile)
	}
	if err := <-profile; err != nil {
		return r, err
	}
	after, err := b.snapshot(ctx, kcm)
	if err != nil {
		return r, err
	}
	if err := r.fromSnapshots(before, after, sync); err != nil {
		return r, err
	}
	list, err := b.client.AutoscalingV2().HorizontalPodAutoscalers(hpaNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return r, err
	}
	for _, h := range list.Items {
		if readsBoth(h.Status.CurrentMetrics) {
			r.Served++
		}
	}
	return r, nil
}

// parallel runs f for 0..n-1 on 32 goroutines, stopping at the first
// error.
func (b *bench) parallel(ctx context.Context, n int, f func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, 32)
	for range 32 {
		go func() {
			for i := range next {
				if err := f(ctx, i); err != nil {
					errs <- err
					cancel()
					return
				}
			}
			errs <- nil
		}()
	}
	var err error
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	for range 32 {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	return err
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func hpaName(i int) string { return fmt.Sprintf("llm-%04d", i) }

// hpaDeployment is one Deployment of one pod the adapter scrapes.
func hpaDeployment(i int) *appsv1.Deployment {
	one := int32(1)
	labels := map[string]string{"app": hpaName(i), "bench": appLabel}
	pod := benchPod(hpaNamespace, i)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: hpaName(i), Namespace: hpaNamespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": hpaName(i)}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: pod.Annotations},
				Spec:       pod.Spec,
			},
		},
	}
}

// benchHPA scales Deployment i on its capacity (Object) and its pods'
// queue depth (Pods). The targets are far above what the pods report, so
// the HPAs read their metrics every sync and keep one replica: the
// replicas the bench serves.
func benchHPA(i int) *autoscalingv2.HorizontalPodAutoscaler {
	one := int32(1)
	ref := autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: hpaName(i)}
	capacity, queue := resource.MustParse("1k"), resource.MustParse("1k")
	return &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: hpaName(i), Namespace: hpaNamespace},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: ref, MinReplicas: &one, MaxReplicas: 4,
			Metrics: []autoscalingv2.MetricSpec{
				{Type: autoscalingv2.ObjectMetricSourceType, Object: &autoscalingv2.ObjectMetricSource{
					DescribedObject: ref,
					Metric:          autoscalingv2.MetricIdentifier{Name: "inference_capacity_utilization"},
					Target:          autoscalingv2.MetricTarget{Type: autoscalingv2.ValueMetricType, Value: &capacity},
				}},
				{Type: autoscalingv2.PodsMetricSourceType, Pods: &autoscalingv2.PodsMetricSource{
					Metric: autoscalingv2.MetricIdentifier{Name: "inference_queue_depth"},
					Target: autoscalingv2.MetricTarget{Type: autoscalingv2.AverageValueMetricType, AverageValue: &queue},
				}},
			},
		},
	}
}

// kcmClient reaches the controller manager's /metrics as the cluster's
// admin; the controller manager's certificate is its own, self-signed.
func (b *bench) kcmClient() (*http.Client, error) {
	cfg := b.env.Cluster.RESTConfig()
	cfg.Host = b.env.Cluster.ControllerManagerURL()
	cfg.Insecure, cfg.CAFile, cfg.CAData = true, "", nil
	return rest.HTTPClientFor(cfg)
}

// metricsSnapshot is the three servers' /metrics at one time.
type metricsSnapshot struct {
	adapter, apiserver, kcm map[string]*dto.MetricFamily
}

func (b *bench) snapshot(ctx context.Context, kcm *http.Client) (metricsSnapshot, error) {
	var s metricsSnapshot
	raw, err := b.adapterGet(ctx, "/metrics")
	if err != nil {
		return s, err
	}
	if s.adapter, err = parseMetrics(raw); err != nil {
		return s, fmt.Errorf("adapter /metrics: %w", err)
	}
	if raw, err = b.client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx); err != nil {
		return s, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	if s.apiserver, err = parseMetrics(raw); err != nil {
		return s, fmt.Errorf("kube-apiserver /metrics: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.env.Cluster.ControllerManagerURL()+"/metrics", nil)
	if err != nil {
		return s, err
	}
	resp, err := kcm.Do(req)
	if err != nil {
		return s, fmt.Errorf("controller manager /metrics: %w", err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil || resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("controller manager /metrics: %s: %w", resp.Status, err)
	}
	if s.kcm, err = parseMetrics(buf.Bytes()); err != nil {
		return s, fmt.Errorf("controller manager /metrics: %w", err)
	}
	return s, nil
}

func parseMetrics(raw []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(bytes.NewReader(raw))
}

// histogramOf merges the histograms of family whose labels hold every
// name=value of match.
func histogramOf(fams map[string]*dto.MetricFamily, family string, match map[string]string) (*histogram.Histogram, error) {
	f := fams[family]
	if f == nil {
		return nil, nil
	}
	var hs []*histogram.Histogram
metrics:
	for _, m := range f.Metric {
		for name, want := range match {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == name {
					found = l.GetValue() == want
				}
			}
			if !found {
				continue metrics
			}
		}
		h, err := histogram.FromDTO(m, 1)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", family, err)
		}
		hs = append(hs, h)
	}
	if len(hs) == 0 {
		return nil, nil
	}
	return histogram.Merge(hs...)
}

// windowOf is the increase of a histogram between two snapshots; nil when
// either lacks it.
func windowOf(before, after map[string]*dto.MetricFamily, family string, match map[string]string) (*histogram.Histogram, error) {
	b, err := histogramOf(before, family, match)
	if err != nil || b == nil {
		return nil, err
	}
	a, err := histogramOf(after, family, match)
	if err != nil || a == nil {
		return nil, err
	}
	return histogram.Increase(b, a)
}

func seconds(s float64) time.Duration {
	if math.IsNaN(s) || math.IsInf(s, 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second)).Round(100 * time.Microsecond)
}

// fromSnapshots fills the API's and the controller's figures.
func (r *hpaResult) fromSnapshots(before, after metricsSnapshot, sync time.Duration) error {
	custom := map[string]string{"group": "custom.metrics.k8s.io"}
	api, err := windowOf(before.adapter, after.adapter, "apiserver_request_duration_seconds", custom)
	if err != nil {
		return fmt.Errorf("adapter: %w", err)
	}
	if api == nil || api.Count == 0 {
		return fmt.Errorf("the adapter served no custom metrics request in %v", r.Measured)
	}
	r.Requests = api.Count
	r.APIp50, r.APIp99 = seconds(histogram.Quantile(0.5, api)), seconds(histogram.Quantile(0.99, api))
	if agg, err := windowOf(before.apiserver, after.apiserver, "apiserver_request_duration_seconds", custom); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	} else if agg != nil && agg.Count > 0 {
		r.AggP99 = seconds(histogram.Quantile(0.99, agg))
	}
	hpa := map[string]string{"name": "horizontalpodautoscaler"}
	lag, err := windowOf(before.kcm, after.kcm, "workqueue_queue_duration_seconds", hpa)
	if err != nil || lag == nil || lag.Count == 0 {
		return fmt.Errorf("controller manager: no HPA queue durations in %v: %w", r.Measured, err)
	}
	r.Reconciles = lag.Count
	r.LagMean, r.LagP99 = seconds(lag.Sum/lag.Count), seconds(histogram.Quantile(0.99, lag))
	// The queue's buckets are decades: the largest at or under a sync
	// period bounds the syncs that were surely on time.
	for i, ub := range lag.Bounds {
		if ub <= sync.Seconds() {
			r.LagBound, r.LagOver = seconds(ub), lag.Count-lag.Counts[i]
		}
	}
	if work, err := windowOf(before.kcm, after.kcm, "workqueue_work_duration_seconds", hpa); err != nil {
		return err
	} else if work != nil && work.Count > 0 {
		r.WorkP99 = seconds(histogram.Quantile(0.99, work))
	}
	return nil
}

// readsBoth reports whether an HPA's status has a value of each of its two
// metrics: the HPA controller lists an entry per metric of the spec and
// leaves the one it could not read empty, with no type.
func readsBoth(current []autoscalingv2.MetricStatus) bool {
	read := 0
	for _, m := range current {
		switch {
		case m.Type == autoscalingv2.ObjectMetricSourceType && m.Object != nil && (m.Object.Current.Value != nil || m.Object.Current.AverageValue != nil),
			m.Type == autoscalingv2.PodsMetricSourceType && m.Pods != nil && m.Pods.Current.AverageValue != nil:
			read++
		}
	}
	return read == 2
}
