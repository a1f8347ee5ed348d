// Package kedascaler serves KEDA's external scaler gRPC protocol
// (externalscaler.proto: IsActive, StreamIsActive, GetMetricSpec,
// GetMetrics) from the values the adapter serves through the custom and
// external metrics APIs, so that a KEDA user keeps KEDA's external
// metrics APIService and still scales on gpuscale's GPU, inference and
// capacity signals, with KEDA's activation and scale to zero. A trigger's
// metadata (docs/keda.md) names the signal, its scope (a model, or a
// Deployment or StatefulSet in the ScaledObject's own namespace), the
// target and the activation threshold.
package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	"k8s.io/metrics/pkg/apis/external_metrics"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	pb "github.com/gpuscale/gpuscale/pkg/adapter/kedascaler/externalscaler"
)

// MetricsReader is where values come from: the provider behind the
// adapter's custom and external metrics APIs (pkg/provider), so a trigger
// reads exactly what an HPA would.
type MetricsReader interface {
	GetMetricByName(ctx context.Context, name types.NamespacedName, info cmprovider.CustomMetricInfo, metricSelector labels.Selector) (*custom_metrics.MetricValue, error)
	GetExternalMetric(ctx context.Context, namespace string, metricSelector labels.Selector, info cmprovider.ExternalMetricInfo) (*external_metrics.ExternalMetricValueList, error)
	ListAllMetrics() []cmprovider.CustomMetricInfo
	ListAllExternalMetrics() []cmprovider.ExternalMetricInfo
}

// modelLabel is the external metrics' label that selects a model, and
// roleLabel the one that selects a role's pool of its pods
// (provider.ModelLabel, provider.RoleLabel; not imported, so this package
// depends on the interface above only).
const (
	modelLabel = "model_name"
	roleLabel  = "role"
)

// roleSignals are the signals served per model and role: the capacity
// signal, of each role's pool (provider.CapacityUtilization).
var roleSignals = []string{"inference_capacity_utilization"}

// DefaultCheckInterval is how often StreamIsActive re-reads a trigger's
// value: the most a change of activity waits before it is pushed, on top
// of the scrape that brought it.
const DefaultCheckInterval = time.Second

// Scaler implements KEDA's ExternalScaler service.
type Scaler struct {
	pb.UnimplementedExternalScalerServer

	metrics       MetricsReader
	catalog       catalog
	checkInterval time.Duration
	log           *slog.Logger
	// authz decides which namespaces a client may read; nil: all
	// (authz.go). streams bounds StreamIsActive (limits.go).
	authz   Authorizer
	streams *streamSlots
}

// NewScaler returns the service over metrics; checkInterval <= 0 means
// DefaultCheckInterval, a nil log discards.
func NewScaler(metrics MetricsReader, checkInterval time.Duration, log *slog.Logger) *Scaler {
	if checkInterval <= 0 {
		checkInterval = DefaultCheckInterval
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scaler{metrics: metrics, catalog: catalogOf(metrics), checkInterval: checkInterval, log: log, streams: newStreamSlots(Limits{}.withDefaults())}
}

var (
	deployments  = schema.GroupResource{Group: "apps", Resource: "deployments"}
	statefulsets = schema.GroupResource{Group: "apps", Resource: "statefulsets"}
)

// catalogOf reads what the provider serves once: its lists are fixed at
// start.
func catalogOf(m MetricsReader) catalog {
	c := catalog{model: map[string]bool{}, object: map[string]bool{}, roles: map[string]bool{}}
	for _, e := range m.ListAllExternalMetrics() {
		c.model[e.Metric] = true
	}
	for _, s := range roleSignals {
		if c.model[s] {
			c.roles[s] = true
		}
	}
	for _, cm := range m.ListAllMetrics() {
		// A signal served for one of the two is accepted for both: the
		// provider answers NotFound, as Unavailable, for the other.
		if cm.GroupResource == deployments || cm.GroupResource == statefulsets {
			c.object[cm.Metric] = true
		}
	}
	return c
}

// GetMetricSpec implements ExternalScalerServer: one metric, the trigger's
// signal, with its target.
func (s *Scaler) GetMetricSpec(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.GetMetricSpecResponse, error) {
	t, err := s.trigger(ctx, ref)
	if err != nil {
		return nil, err
	}
	return &pb.GetMetricSpecResponse{MetricSpecs: []*pb.MetricSpec{{
		MetricName:      t.metricName(),
		TargetSize:      toInt64(math.Ceil(t.target)), // for clients that read only the deprecated field
		TargetSizeFloat: t.target,
	}}}, nil
}

// GetMetrics implements ExternalScalerServer. The request's metric name is
// the one GetMetricSpec gave; the value is read for the trigger's
// metadata, which KEDA sends along.
func (s *Scaler) GetMetrics(ctx context.Context, req *pb.GetMetricsRequest) (*pb.GetMetricsResponse, error) {
	t, err := s.trigger(ctx, req.GetScaledObjectRef())
	if err != nil {
		return nil, err
	}
	v, err := s.value(ctx, t)
	if err != nil {
		return nil, err
	}
	return &pb.GetMetricsResponse{MetricValues: []*pb.MetricValue{{
		MetricName:       t.metricName(),
		MetricValue:      toInt64(math.Round(v)),
		MetricValueFloat: v,
	}}}, nil
}

// IsActive implements ExternalScalerServer: active when the value exceeds
// the activation target. No value is an error, never inactive.
func (s *Scaler) IsActive(ctx context.Context, ref *pb.ScaledObjectRef) (*pb.IsActiveResponse, error) {
	t, err := s.trigger(ctx, ref)
	if err != nil {
		return nil, err
	}
	active, err := s.active(ctx, t)
	if err != nil {
		return nil, err
	}
	return &pb.IsActiveResponse{Result: active}, nil
}

// StreamIsActive implements ExternalScalerServer. It sends the first
// activity it can read at once, then each change within checkInterval of
// the value that shows it, so a model at zero replicas wakes without
// waiting for KEDA's polling interval. A failed read sends nothing (no
// value is not inactivity) and is retried at the next check; wrong
// metadata ends the stream with its error.
func (s *Scaler) StreamIsActive(ref *pb.ScaledObjectRef, stream pb.ExternalScaler_StreamIsActiveServer) error {
	ctx := stream.Context()
	t, err := s.trigger(ctx, ref)
	if err != nil {
		return err
	}
	if err := s.streams.take(t.namespace); err != nil {
		return err
	}
	defer s.streams.release(t.namespace)
	ticker := time.NewTicker(s.checkInterval)
	defer ticker.Stop()
	var sent, last bool
	authorized := time.Now()
	for {
		if time.Since(authorized) >= reauthorizeEvery {
			if err := s.authorize(ctx, t); err != nil {
				return err
			}
			authorized = time.Now()
		}
		active, err := s.active(ctx, t)
		switch {
		case err != nil:
			if ctx.Err() != nil {
				return nil
			}
			s.log.Debug("KEDA stream: no value", "trigger", t.String(), "err", err)
		case !sent || active != last:
			if err := stream.Send(&pb.IsActiveResponse{Result: active}); err != nil {
				return err
			}
			s.log.Debug("KEDA stream: activity", "trigger", t.String(), "active", active)
			sent, last = true, active
		}
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// trigger parses ref's metadata and authorizes the RPC's client to read
// its value.
func (s *Scaler) trigger(ctx context.Context, ref *pb.ScaledObjectRef) (trigger, error) {
	t, err := parseTrigger(ref, s.catalog)
	if err != nil {
		return trigger{}, err
	}
	if err := s.authorize(ctx, t); err != nil {
		return trigger{}, err
	}
	return t, nil
}

// toInt64 converts v, saturating at int64's bounds, which a plain
// conversion would wrap around (a target of 9.3e18 became -9.2e18).
func toInt64(v float64) int64 {
	switch {
	case v >= math.MaxInt64:
		return math.MaxInt64
	case v <= math.MinInt64:
		return math.MinInt64
	case math.IsNaN(v):
		return 0
	}
	return int64(v)
}

func (s *Scaler) active(ctx context.Context, t trigger) (bool, error) {
	v, err := s.value(ctx, t)
	if err != nil {
		return false, err
	}
	return v > t.activation, nil
}

// value reads the trigger's value through the provider; missing data is
// Unavailable, with the provider's reason.
func (s *Scaler) value(ctx context.Context, t trigger) (float64, error) {
	var (
		v   float64
		err error
	)
	if t.scope == scopeModel {
		v, err = s.modelValue(ctx, t)
	} else {
		gr := deployments
		if t.scope == scopeStatefulSet {
			gr = statefulsets
		}
		var mv *custom_metrics.MetricValue
		mv, err = s.metrics.GetMetricByName(ctx, types.NamespacedName{Namespace: t.namespace, Name: t.name},
			cmprovider.CustomMetricInfo{GroupResource: gr, Namespaced: true, Metric: t.signal}, labels.Everything())
		if err == nil {
			v = mv.Value.AsApproximateFloat64()
		}
	}
	if err != nil {
		return 0, readError(ctx, t, err)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, status.Errorf(codes.Unavailable, "no value of %s: not a finite number", t)
	}
	return v, nil
}

func (s *Scaler) modelValue(ctx context.Context, t trigger) (float64, error) {
	set := labels.Set{modelLabel: t.name}
	if t.role != "" {
		set[roleLabel] = t.role
	}
	sel := labels.SelectorFromValidatedSet(set) // validated by parseTrigger
	list, err := s.metrics.GetExternalMetric(ctx, t.namespace, sel, cmprovider.ExternalMetricInfo{Metric: t.signal})
	if err != nil {
		return 0, err
	}
	for _, item := range list.Items {
		if item.MetricLabels[modelLabel] == t.name && item.MetricLabels[roleLabel] == t.role {
			return item.Value.AsApproximateFloat64(), nil
		}
	}
	return 0, errNoModelItem
}

var errNoModelItem = errors.New("the model has no item in the answer")

func readError(ctx context.Context, t trigger, err error) error {
	if ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	if apierrors.IsNotFound(err) {
		return status.Errorf(codes.Unavailable, "no value of %s (no ready pod with a fresh sample, or no such object): %v", t, err)
	}
	return status.Errorf(codes.Unavailable, "no value of %s: %v", t, fmt.Errorf("reading the provider: %w", err))
}
