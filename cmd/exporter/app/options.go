// Package app wires the exporter's flags to its components: the GPU
// backend, pod attribution, the collection loop and the HTTP server.
package app

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpuscale/gpuscale/pkg/gpu/dcgm"
	"github.com/gpuscale/gpuscale/pkg/logging"
)

// Options are the exporter's command-line settings.
type Options struct {
	Backend         string
	CollectInterval time.Duration
	Hostname        string

	SimGPUs        int
	SimModel       string
	SimMIGProfiles string
	SimVGPU        bool

	PodResourcesSocket   string
	PodResourcesInterval time.Duration
	PodResourcesTimeout  time.Duration
	ExtraResourceNames   string

	ContainerRuntimeSocket string
	ProcRoot               string
	Profiling              bool

	// DCGMSchema is the dcgm-exporter naming schema served: 4.8 or 4.10.
	DCGMSchema string
	// Collectors is a dcgm-exporter collector file selecting the fields
	// served; empty serves every field.
	Collectors string
	// XIDCountWindow is DCGM_EXP_XID_ERRORS_COUNT's window; 0 serves none.
	XIDCountWindow time.Duration
	// PodLabels and PodUID add each holder pod's labels and UID from the
	// API server, as dcgm-exporter's --kubernetes-enable-pod-labels and
	// --kubernetes-enable-pod-uid do; PodLabelAllowlist filters the
	// labels by name.
	PodLabels, PodUID bool
	PodLabelAllowlist string

	ListenAddress string
	WebConfigFile string
	// Log is --logging-format and --log.level.
	Log *logging.Options

	// ReadHeaderTimeout, ReadTimeout and WriteTimeout bound how long one
	// client can hold a connection and its goroutine: a client that sends
	// its request (or reads the response) a byte at a time is cut off.
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	// MaxRequests bounds the /metrics requests served at once, and apart
	// from them the API requests; more wait up to MaxRequestsWait for a
	// slot, then get 503.
	MaxRequests     int
	MaxRequestsWait time.Duration
	// ReservedTokenFile holds the token of the reserved lane
	// (httpapi.Config.ReservedToken), which the adapter presents; it is
	// followed as it appears, changes or vanishes (pkg/tokenfile). Empty
	// opens no lane.
	ReservedTokenFile       string
	ReservedMaxRequests     int
	ReservedMaxRequestsWait time.Duration
}

// NewOptions returns the defaults.
func NewOptions() *Options {
	return &Options{
		Backend:              "nvml",
		CollectInterval:      time.Second,
		SimGPUs:              8,
		SimModel:             "NVIDIA H100 80GB HBM3",
		PodResourcesSocket:   "/var/lib/kubelet/pod-resources/kubelet.sock",
		PodResourcesInterval: 5 * time.Second,
		PodResourcesTimeout:  2 * time.Second,
		ProcRoot:             "/proc",
		Profiling:            true,
		DCGMSchema:           DefaultDCGMSchema,
		XIDCountWindow:       5 * time.Minute,
		ListenAddress:        ":9400",
		Log:                  logging.New(),
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         30 * time.Second,
		MaxRequests:          256,
		MaxRequestsWait:      time.Second,

		ReservedMaxRequests:     4,
		ReservedMaxRequestsWait: 5 * time.Second,
	}
}

// DefaultDCGMSchema is dcgm-exporter 4.8's naming: the names every
// dashboard, alert and recording rule written for dcgm-exporter up to
// 4.8 and for gpuscale's earlier releases read, so that upgrading gpuscale
// renames no series. dcgm-exporter's own move to 4.10's names came with
// an upgrade checklist; gpuscale's is one flag (--dcgm-schema=4.10), and
// gpuscale's adapter, dashboards and alerts read both.
const DefaultDCGMSchema = "4.8"

// AddFlags registers the options on fs.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Backend, "backend", o.Backend, "GPU backend: nvml (the NVIDIA driver) or sim (simulated GPUs, labelled simulated=\"true\").")
	fs.DurationVar(&o.CollectInterval, "collect-interval", o.CollectInterval, "How often the background loop reads every GPU.")
	fs.StringVar(&o.Hostname, "hostname", o.Hostname, "Value of the Hostname label (default: $NODE_NAME, else the host name).")
	fs.IntVar(&o.SimGPUs, "sim-gpus", o.SimGPUs, "Number of simulated GPUs (sim backend).")
	fs.StringVar(&o.SimModel, "sim-model", o.SimModel, "Model name of the simulated GPUs (sim backend).")
	fs.StringVar(&o.SimMIGProfiles, "sim-mig-profiles", o.SimMIGProfiles, "Comma-separated MIG layout applied to every simulated GPU, e.g. 3g.40gb,2g.20gb,1g.10gb,1g.10gb (sim backend).")
	fs.BoolVar(&o.SimVGPU, "sim-vgpu", o.SimVGPU, "Simulate licensed vGPU guests, which serve DCGM_FI_DEV_VGPU_LICENSE_STATUS; bare metal has no licence (sim backend).")
	fs.StringVar(&o.PodResourcesSocket, "pod-resources-socket", o.PodResourcesSocket, "Kubelet pod-resources socket; empty disables pod attribution.")
	fs.DurationVar(&o.PodResourcesInterval, "pod-resources-interval", o.PodResourcesInterval, "How often pod attribution is refreshed in the background.")
	fs.DurationVar(&o.PodResourcesTimeout, "pod-resources-timeout", o.PodResourcesTimeout, "Deadline of one pod-resources List call.")
	fs.StringVar(&o.ExtraResourceNames, "resource-names", o.ExtraResourceNames, "Extra comma-separated extended resource names that hold GPUs (a trailing * matches a prefix), besides nvidia.com/gpu, nvidia.com/gpu.shared and nvidia.com/mig-*.")
	fs.StringVar(&o.ContainerRuntimeSocket, "container-runtime-socket", o.ContainerRuntimeSocket, "CRI socket of the container runtime (e.g. /run/containerd/containerd.sock); set, a GPU shared by several pods serves each pod its own processes' utilization and memory (nvml backend). Empty: every pod of a shared GPU is served the device's values.")
	fs.StringVar(&o.ProcRoot, "proc-root", o.ProcRoot, "Mount point of the host's /proc, read for GPU processes' cgroups (needs hostPID or a host /proc mount).")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve the DCGM_FI_PROF_* profiling fields through NVML GPM on GPUs that support it (Hopper and later).")
	fs.StringVar(&o.DCGMSchema, "dcgm-schema", o.DCGMSchema, "dcgm-exporter naming schema of the GPU series: 4.8 (DCGM_FI_DEV_GPU_UTIL in %, framebuffer in MiB, clocks in MHz, energy in mJ, Hostname and hostname, DCGM_FI_DRIVER_VERSION: dcgm-exporter 4.8 and earlier) or 4.10 (dcgm-exporter 4.10's DCGM 4.7 names and units: DCGM_FI_DEV_GPU_UTIL_RATIO from 0 to 1, DCGM_FI_DEV_FB_USED_BYTES, hostname, DCGM_FI_SYSTEM_DRIVER_VERSION). The default is 4.8 so that upgrading gpuscale renames no series an existing dashboard, alert or recording rule reads; gpuscale's adapter, dashboards and alerts read both (docs/dcgm-compatibility.md).")
	fs.StringVar(&o.Collectors, "collectors", o.Collectors, "dcgm-exporter collector file (CSV: field, type, help; either schema's names) selecting the fields served, as dcgm-exporter's -f; empty serves every field.")
	fs.DurationVar(&o.XIDCountWindow, "xid-count-window", o.XIDCountWindow, "Window of DCGM_EXP_XID_ERRORS_COUNT, the XIDs of each code within it (dcgm-exporter's --xid-count-window-size); 0 serves no such series.")
	fs.BoolVar(&o.PodLabels, "kubernetes-enable-pod-labels", o.PodLabels, "Add each GPU-holding pod's labels (sanitized, at most 16, --kubernetes-pod-label-allowlist-regex) to its series, read from the API server (needs get and list on pods).")
	fs.BoolVar(&o.PodUID, "kubernetes-enable-pod-uid", o.PodUID, "Add each GPU-holding pod's UID as pod_uid, read from the API server (needs get and list on pods).")
	fs.StringVar(&o.PodLabelAllowlist, "kubernetes-pod-label-allowlist-regex", o.PodLabelAllowlist, "Comma-separated regular expressions: only pod labels whose key one matches are added (empty: all).")
	fs.StringVar(&o.ListenAddress, "web.listen-address", o.ListenAddress, "Address to serve /metrics, probes and the API on.")
	fs.StringVar(&o.WebConfigFile, "web.config.file", o.WebConfigFile, "Prometheus exporter-toolkit web config file enabling TLS and/or basic auth.")
	o.Log.AddFlags(fs)
	fs.DurationVar(&o.ReadHeaderTimeout, "web.read-header-timeout", o.ReadHeaderTimeout, "How long a client may take to send a request's headers.")
	fs.DurationVar(&o.ReadTimeout, "web.read-timeout", o.ReadTimeout, "How long a client may take to send a whole request, body included.")
	fs.DurationVar(&o.WriteTimeout, "web.write-timeout", o.WriteTimeout, "How long serving a request may take, from the end of its headers to the end of the response, waiting for a slot (--web.max-requests-wait) included.")
	fs.IntVar(&o.MaxRequests, "web.max-requests", o.MaxRequests, "Most /metrics requests served at once, and apart from them most API requests (probes are not counted); more wait for a slot. 0 means no limit.")
	fs.DurationVar(&o.MaxRequestsWait, "web.max-requests-wait", o.MaxRequestsWait, "How long a request over --web.max-requests waits for a slot before it gets 503; at most --web.max-requests wait, more get 503 at once.")
	fs.StringVar(&o.ReservedTokenFile, "web.reserved-token-file", o.ReservedTokenFile, "File holding the token of a reserved lane: requests with \"Authorization: Bearer <token>\" (the adapter's scrapes) get --web.reserved-max-requests slots of their own that no other client can take. Re-read when it appears or changes (an optional Secret volume, which the adapter's --exporter-token-secret fills): until it holds a token of 16 characters or more, there is no lane. Empty: no lane.")
	fs.IntVar(&o.ReservedMaxRequests, "web.reserved-max-requests", o.ReservedMaxRequests, "Requests of the reserved lane served at once.")
	fs.DurationVar(&o.ReservedMaxRequestsWait, "web.reserved-max-requests-wait", o.ReservedMaxRequestsWait, "How long a reserved-lane request waits for a slot before it gets 503.")
}

// Complete fills derived defaults.
func (o *Options) Complete() {
	if o.Hostname == "" {
		o.Hostname = os.Getenv("NODE_NAME")
	}
	if o.Hostname == "" {
		o.Hostname, _ = os.Hostname()
	}
}

// Validate reports every invalid option at once.
func (o *Options) Validate() error {
	var errs []error
	switch o.Backend {
	case "nvml", "sim":
	default:
		errs = append(errs, fmt.Errorf("--backend must be nvml or sim, got %q", o.Backend))
	}
	if o.CollectInterval < 10*time.Millisecond {
		errs = append(errs, fmt.Errorf("--collect-interval must be at least 10ms, got %v", o.CollectInterval))
	}
	if o.Backend == "sim" && (o.SimGPUs < 1 || o.SimGPUs > 64) {
		errs = append(errs, fmt.Errorf("--sim-gpus must be between 1 and 64, got %d", o.SimGPUs))
	}
	if o.PodResourcesInterval <= 0 || o.PodResourcesTimeout <= 0 {
		errs = append(errs, errors.New("--pod-resources-interval and --pod-resources-timeout must be positive"))
	}
	// Zero would mean no timeout at all in net/http: exactly what these
	// flags are there to prevent.
	if o.ReadHeaderTimeout <= 0 || o.ReadTimeout <= 0 || o.WriteTimeout <= 0 {
		errs = append(errs, errors.New("--web.read-header-timeout, --web.read-timeout and --web.write-timeout must be positive"))
	}
	if o.ReadHeaderTimeout > o.ReadTimeout {
		errs = append(errs, fmt.Errorf("--web.read-header-timeout (%v) must not exceed --web.read-timeout (%v)", o.ReadHeaderTimeout, o.ReadTimeout))
	}
	if o.MaxRequests < 0 || o.MaxRequestsWait < 0 {
		errs = append(errs, errors.New("--web.max-requests and --web.max-requests-wait must be 0 or more"))
	}
	if _, err := dcgm.ParseSchema(o.DCGMSchema); err != nil {
		errs = append(errs, fmt.Errorf("--dcgm-schema must be 4.8 or 4.10, got %q", o.DCGMSchema))
	}
	if o.XIDCountWindow < 0 {
		errs = append(errs, errors.New("--xid-count-window must be 0 or more"))
	}
	for _, re := range splitList(o.PodLabelAllowlist) {
		if _, err := regexp.Compile(re); err != nil {
			errs = append(errs, fmt.Errorf("--kubernetes-pod-label-allowlist-regex: %w", err))
		}
	}
	if o.ReservedTokenFile != "" && (o.ReservedMaxRequests < 1 || o.ReservedMaxRequestsWait < 0 || o.ReservedMaxRequestsWait >= o.WriteTimeout) {
		errs = append(errs, errors.New("--web.reserved-max-requests must be at least 1 and --web.reserved-max-requests-wait shorter than --web.write-timeout"))
	}
	if o.MaxRequestsWait >= o.WriteTimeout {
		errs = append(errs, fmt.Errorf("--web.max-requests-wait (%v) must be shorter than --web.write-timeout (%v), which includes it", o.MaxRequestsWait, o.WriteTimeout))
	}
	return errors.Join(errs...)
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
