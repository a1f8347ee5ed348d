package promsource

import (
	"math"
	"strconv"
	"strings"

	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

// The defaults read the series the embedded source scrapes, with the labels
// a usual Kubernetes scrape config gives them: namespace and pod of the
// inference pod (from kubernetes_sd relabelling), and for the GPU exporter
// the exporter's own namespace and pod labels of the pod using each GPU
// (scrape it with honor_labels: true, as dcgm-exporter's docs say) and
// Hostname or hostname of the node. Where a pod speaks several dialects,
// "or on (namespace, pod)" keeps the first, in the embedded source's
// detection order.
//
// The GPU series are read in both of dcgm-exporter's naming schemas, as the
// embedded source reads them (pkg/gpu/dcgm): each field under its 4.8 name, or
// its 4.10 name times the factor to the 4.8 unit; the node under Hostname
// (4.8.2 and earlier, and gpuscale's 4.8 mode) or hostname (4.8.3 on),
// copied to Hostname, the label node results are keyed by.

// podSel is a selector of metric restricted to the asked pods; modelLabel,
// when set, is where the metric selector on model_name applies.
func podSel(metric, modelLabel string) string {
	s := metric + `{namespace="{{.Namespace}}", pod=~"{{.PodRegex}}"`
	if modelLabel != "" {
		s += `{{.ModelMatch "` + modelLabel + `"}}`
	}
	return s + "}"
}

// firstOf joins expressions so that each pod's value comes from the first
// that has one.
func firstOf(exprs ...string) string { return strings.Join(exprs, " or on (namespace, pod) ") }

func rate(bucket, modelLabel string) string {
	return "rate(" + podSel(bucket, modelLabel) + "[{{.Window}}])"
}

// The GPU fields the GPU half's code names: utilization, whose node query
// sums a shared GPU's shares, and the memory fields gpu_memory_utilization
// is computed from. Every other GPU query is a gpu.Specs Feed's (gpuQueries).
const (
	gpuUtil = dcgm.GPUUtil
	fbUsed  = dcgm.FBUsed
	fbFree  = dcgm.FBFree
	fbRes   = dcgm.FBReserved
	shared  = dcgm.GPUShared
)

// converted returns sel(name) in the 4.8 unit of the field whose 4.8 name
// is name48: the 4.8 series, or the 4.10 one scaled; of the two, those the
// server has (names.keep).
func (ns names) converted(name48 string, sel func(name string) string) string {
	f, _, _, ok := gpu.LookupDCGM(name48)
	if !ok {
		panic("promsource: " + name48 + " is not in gpu.Specs")
	}
	aliases := keep(ns, f.Aliases(), func(a dcgm.Alias) []string { return []string{a.Name} })
	out := make([]string, 0, 2)
	for _, a := range aliases {
		switch inv := 1 / a.ToUnit48; {
		case a.ToUnit48 == 1:
			out = append(out, sel(a.Name))
		case a.ToUnit48 < 1 && inv == math.Trunc(inv):
			out = append(out, sel(a.Name)+" / "+strconv.FormatFloat(inv, 'f', -1, 64))
		default:
			out = append(out, strconv.FormatFloat(a.ToUnit48, 'f', -1, 64)+" * "+sel(a.Name))
		}
	}
	return "(" + strings.Join(out, " or ") + ")"
}

// podGPU is a GPU field of the asked pods, in its 4.8 unit.
func (ns names) podGPU(name48 string) string {
	return ns.converted(name48, func(n string) string { return podSel(n, "") })
}

// nodeGPU is a GPU field of the whole GPUs of the asked nodes, in its 4.8
// unit, with the node in Hostname whichever label the exporter used.
func (ns names) nodeGPU(name48 string) string {
	sel := func(name string) string {
		const old = `, GPU_I_ID=""}`
		byHostname := name + `{Hostname=~"{{.NodeRegex}}"` + old
		byLower := `label_replace(` + name + `{Hostname="", hostname=~"{{.NodeRegex}}"` + old +
			`, "Hostname", "$1", "hostname", "(.*)")`
		return "(" + byHostname + " or " + byLower + ")"
	}
	return ns.converted(name48, sel)
}

// nodeUtil is each whole GPU's utilization: on a GPU whose series are the
// pods' shares (gpuscale_gpu_shared), their sum, else the value every pod's
// series repeats.
func (ns names) nodeUtil() string {
	sel := ns.nodeGPU(gpuUtil)
	return `max by (Hostname, UUID) (` + sel + ` unless on (UUID) ` + shared + `) or ` +
		`sum by (Hostname, UUID) (` + sel + ` and on (UUID) ` + shared + `)`
}

// memUtil is used / (used + free + reserved) in percent; a GPU that does
// not report reserved memory counts it as 0. Its fields are the gpu.Part
// ones and the memory used.
func memUtil(by string, sel func(string) string) string {
	return "100 * sum by (" + by + ") (" + sel(fbUsed) + ") / sum by (" + by + ") (" +
		sel(fbUsed) + " + " + sel(fbFree) + " + (" + sel(fbRes) + " or " + sel(fbFree) + " * 0))"
}

// The requests routers hold per model (the embedded source's router
// dialects, pkg/adapter/inference/router.go): they count towards a model's queue,
// and are all of it while the model has no server.
const (
	eppQueue     = "inference_extension_flow_control_queue_size"
	dynamoQueued = "dynamo_frontend_queued_requests"
)

// routerHeld is a router's held requests with their model label copied to
// model_name.
func routerHeld(metric, modelLabel string) string {
	return toModelName(podSel(metric, modelLabel), modelLabel)
}

var (
	ttftMetrics = []string{provider.TTFTP50, provider.TTFTP90, provider.TTFTP99}
	itlMetrics  = []string{provider.ITLP50, provider.ITLP90, provider.ITLP99}
)

// factor writes a Feed's Scale: "" for 1, else the number.
func factor(scale float64) string {
	if scale == 1 {
		return ""
	}
	return strconv.FormatFloat(scale, 'f', -1, 64)
}

// gpuQueries adds to f the queries of every gpu.Specs field that feeds a
// signal: for a mean, its pods' and its nodes' (whole GPUs, each counted
// once) averages, the factor to the signal's unit first; for a sum, its
// pods' sum, the factor after. gpu_memory_utilization, made of parts, is
// memUtil's; a node's utilization is nodeUtil's, which sums a shared
// GPU's shares.
func (ns names) gpuQueries(f QueryFile) {
	for i := range gpu.Specs {
		spec := &gpu.Specs[i]
		feed := spec.Feed
		if feed == nil {
			continue
		}
		name48 := spec.DCGM[0].Name48
		k := factor(feed.Scale)
		switch feed.Agg {
		case gpu.Mean:
			if k != "" {
				k += " * "
			}
			f.Pods[feed.Signal.Served()] = k + "avg by (namespace, pod) (" + ns.podGPU(name48) + ")"
			node := `max by (Hostname, UUID) (` + ns.nodeGPU(name48) + `)`
			if name48 == gpuUtil {
				node = ns.nodeUtil()
			}
			f.Nodes[feed.Signal.Served()] = k + "avg by (Hostname) (" + node + ")"
		case gpu.Sum:
			if k != "" {
				k = " * " + k
			}
			f.Pods[feed.Signal.Served()] = "sum by (namespace, pod) (" + ns.podGPU(name48) + ")" + k
		}
	}
	nodeSel := func(m string) string {
		// GPU_I_ID="": whole GPUs only, MIG instances are not counted
		// twice; max by UUID: a GPU shared by pods is one GPU.
		return `max by (Hostname, UUID) (` + ns.nodeGPU(m) + `)`
	}
	f.Pods[provider.GPUMemoryUtilization] = memUtil("namespace, pod", ns.podGPU)
	f.Nodes[provider.GPUMemoryUtilization] = memUtil("Hostname", nodeSel)
}

// DefaultQueries returns the compiled-in templates: every engine's and
// both dcgm-exporter schemas' series, whichever the server has.
func DefaultQueries() QueryFile { return names{}.defaults() }

// defaults returns the compiled-in templates of the series ns keeps.
func (ns names) defaults() QueryFile {
	f := QueryFile{
		Pods: map[string]string{
			provider.QueueDepth:         ns.engineGauge("sum", "namespace, pod", dialect.Queue, false),
			provider.RequestsRunning:    ns.engineGauge("sum", "namespace, pod", dialect.Running, false),
			provider.KVCacheUtilization: ns.engineGauge("avg", "namespace, pod", dialect.KVCache, false),
		},
		Workload: map[string]string{},
		Nodes:    map[string]string{},
		Models: map[string]string{
			provider.QueueDepth: ns.engineGauge("sum", "model_name", dialect.Queue, true,
				routerHeld(eppQueue, "target_model_name"), routerHeld(dynamoQueued, "model")),
			provider.TTFTP90: ns.engineQuantile(dialect.TTFT, "model_name", true),
		},
	}
	ns.gpuQueries(f)
	for _, m := range ttftMetrics {
		f.Pods[m] = ns.engineQuantile(dialect.TTFT, "namespace, pod", false)
		f.Workload[m] = ns.engineQuantile(dialect.TTFT, "", false)
	}
	for _, m := range itlMetrics {
		f.Pods[m] = ns.engineQuantile(dialect.ITL, "namespace, pod", false)
		f.Workload[m] = ns.engineQuantile(dialect.ITL, "", false)
	}
	f.Models[provider.ITLP90] = ns.engineQuantile(dialect.ITL, "model_name", true)
	return f
}
