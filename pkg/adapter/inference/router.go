package inference

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// Router dialects: routers and gateways in front of inference servers that
// hold a model's requests while it has no ready replica. They report no
// server signals, only how many requests they hold per model, which is
// what wakes a model scaled to zero.
const (
	// EPP is the Gateway API inference extension's endpoint picker
	// (sigs.k8s.io/gateway-api-inference-extension) with its flow control
	// layer.
	EPP Dialect = "epp"
	// DynamoFrontend is NVIDIA Dynamo's OpenAI-compatible HTTP frontend.
	DynamoFrontend Dialect = "dynamo-frontend"
)

// ErrUnknownRouter is wrapped by DetectRouter's error when a scrape holds
// no metrics of a known router.
var ErrUnknownRouter = errors.New("unknown router dialect")

// ErrTooManyModels is wrapped by DetectRouter's error when a router names
// more models than MaxRouterModels.
var ErrTooManyModels = errors.New("too many models")

// MaxRouterModels bounds the models one router scrape may name. A gateway
// fronting LoRA adapters routes hundreds; each costs the adapter memory for
// as long as the router lives, so a scrape past it is refused whole.
const MaxRouterModels = 4096

// routerMapping is how one router dialect's held-request gauge maps onto
// RouterSignals.
type routerMapping struct {
	dialect Dialect
	// prefixes mark the dialect: any family whose name starts with one.
	// The held gauge has no series until the router has held a request,
	// so an idle router is told by its other families.
	prefixes []string
	// held is the gauge of requests the router holds, one series per
	// model and whatever else the router splits it by (summed).
	held string
	// modelLabels name the model, first non-empty wins.
	modelLabels []string
}

// routerMappings in detection priority. Names and labels are the projects'
// own; see docs/metrics.md ("Routers and gateways").
var routerMappings = []routerMapping{
	{
		// gateway-api-inference-extension v1.5.0,
		// pkg/epp/metrics/metrics.go (flowControlQueueSize, Subsystem
		// "inference_extension", labels fairness_id, priority,
		// inference_pool, model_name, target_model_name), incremented in
		// pkg/epp/flowcontrol/controller/controller.go from EnqueueAndWait
		// until the request's final outcome (dispatched, rejected,
		// evicted): the requests the EPP holds. target_model_name is the
		// model after the InferenceObjective's rewrite, the name the
		// pool's servers report as their model_name, so it comes first.
		dialect:     EPP,
		prefixes:    []string{"inference_extension_", "inference_objective_", "inference_pool_"},
		held:        "inference_extension_flow_control_queue_size",
		modelLabels: []string{"target_model_name", "model_name"},
	},
	{
		// ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs
		// (http_queue_gauge: IntGaugeVec "Number of requests in HTTP
		// processing queue", label "model"), named from
		// lib/runtime/src/metrics/prometheus_names.rs (name_prefix::FRONTEND
		// "dynamo_frontend", frontend_service::QUEUED_REQUESTS
		// "queued_requests"): requests the frontend accepted that have not
		// had their first response yet.
		dialect:     DynamoFrontend,
		prefixes:    []string{"dynamo_frontend_"},
		held:        "dynamo_frontend_queued_requests",
		modelLabels: []string{"model"},
	},
}

// RouterSignals are what one scrape of one router says.
type RouterSignals struct {
	Dialect Dialect
	// Held is the number of requests held per model: every model the
	// router names, 0 included. A model whose series were rejected is
	// absent: a sum without them would be a wrong number.
	Held map[string]float64
	// Rejected lists the series, and sums, that were not read.
	Rejected []Rejection
}

// RouterFamilies returns what DetectRouter reads of a scrape: the held
// gauges, and the prefixes that tell a router whose gauge has no series.
func RouterFamilies() (names, prefixes []string) {
	for _, m := range routerMappings {
		names = append(names, m.held)
		prefixes = append(prefixes, m.prefixes...)
	}
	return names, prefixes
}

// IsRouter reports whether a scrape is a known router's: it has a family
// of one of the router dialects' prefixes and none of an inference
// server's dialect, whose signals take precedence.
func IsRouter(families map[string]*dto.MetricFamily) bool {
	if _, _, err := match(families); err == nil {
		return false
	}
	return matchRouter(families) != nil
}

func matchRouter(families map[string]*dto.MetricFamily) *routerMapping {
	for i := range routerMappings {
		for name := range families {
			for _, p := range routerMappings[i].prefixes {
				if strings.HasPrefix(name, p) {
					return &routerMappings[i]
				}
			}
		}
	}
	return nil
}

// DetectRouter recognises the router behind one scrape and reads the
// requests it holds per model. Series without a model are skipped (a
// router that cannot say for which model it holds a request cannot wake
// one); a series whose value is no request count, or a model's sum out of
// range, is listed in Rejected and its model left out.
func DetectRouter(families map[string]*dto.MetricFamily) (*RouterSignals, error) {
	m := matchRouter(families)
	if m == nil {
		return nil, fmt.Errorf("%w: no %s metrics in the scrape", ErrUnknownRouter, strings.Join(routerPrefixes(), "*, ")+"*")
	}
	out := &RouterSignals{Dialect: m.dialect, Held: map[string]float64{}}
	mf := families[m.held]
	totals := map[string]*total{}
	for _, metric := range mf.GetMetric() {
		model := firstLabel(metric, m.modelLabels)
		if model == "" {
			continue
		}
		if err := checkModelName(model); err != nil {
			// Not counted among the models: too long to keep.
			out.Rejected = append(out.Rejected, Rejection{Series: Describe(m.held, metric), Err: err})
			continue
		}
		t := totals[model]
		if t == nil {
			if len(totals) == MaxRouterModels {
				return nil, fmt.Errorf("%w: %s names more than %d models", ErrTooManyModels, m.held, MaxRouterModels)
			}
			t = &total{}
			totals[model] = t
		}
		v, err := gaugeValue(mf, metric)
		if err != nil {
			t.void = true
		} else {
			err = t.add(signal.QueueDepth, v)
		}
		if err != nil {
			out.Rejected = append(out.Rejected, Rejection{Series: Describe(m.held, metric), Err: err})
		}
	}
	models := make([]string, 0, len(totals))
	for model := range totals {
		models = append(models, model)
	}
	sort.Strings(models) // rejections in a stable order
	for _, model := range models {
		t := totals[model]
		if t.void {
			continue
		}
		if err := signal.QueueDepth.Check(t.sum); err != nil {
			out.Rejected = append(out.Rejected, Rejection{Series: fmt.Sprintf("sum of %s for model %q", m.held, model), Err: err})
			continue
		}
		out.Held[model] = t.sum
	}
	return out, nil
}

func routerPrefixes() []string {
	var out []string
	for _, m := range routerMappings {
		out = append(out, m.prefixes...)
	}
	return out
}

// firstLabel returns the value of the first of names the series has with a
// non-empty value: EPP leaves target_model_name empty when no rewrite
// applies.
func firstLabel(m *dto.Metric, names []string) string {
	for _, name := range names {
		for _, lp := range m.GetLabel() {
			if lp.GetName() == name && lp.GetValue() != "" {
				return lp.GetValue()
			}
		}
	}
	return ""
}
