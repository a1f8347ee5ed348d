// Package exporterapp wires the exporter's flags to its components: the GPU
// backend, pod attribution, the collection loop and the HTTP server.
package exporterapp

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/gpuscale/gpuscale/internal/logformat"
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

	ListenAddress string
	WebConfigFile string
	// Log is --logging-format and --log.level.
	Log *logformat.Options

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
		ListenAddress:        ":9400",
		Log:                  logformat.New(),
		ReadHeaderTimeout:    5 * time.Second,
		ReadTimeout:          10 * time.Second,
		WriteTimeout:         30 * time.Second,
		MaxRequests:          16,
		MaxRequestsWait:      time.Second,
	}
}

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
	fs.StringVar(&o.ListenAddress, "web.listen-address", o.ListenAddress, "Address to serve /metrics, probes and the API on.")
	fs.StringVar(&o.WebConfigFile, "web.config.file", o.WebConfigFile, "Prometheus exporter-toolkit web config file enabling TLS and/or basic auth.")
	o.Log.AddFlags(fs)
	fs.DurationVar(&o.ReadHeaderTimeout, "web.read-header-timeout", o.ReadHeaderTimeout, "How long a client may take to send a request's headers.")
	fs.DurationVar(&o.ReadTimeout, "web.read-timeout", o.ReadTimeout, "How long a client may take to send a whole request, body included.")
	fs.DurationVar(&o.WriteTimeout, "web.write-timeout", o.WriteTimeout, "How long serving a request may take, from the end of its headers to the end of the response, waiting for a slot (--web.max-requests-wait) included.")
	fs.IntVar(&o.MaxRequests, "web.max-requests", o.MaxRequests, "Most /metrics requests served at once, and apart from them most API requests (probes are not counted); more wait for a slot. 0 means no limit.")
	fs.DurationVar(&o.MaxRequestsWait, "web.max-requests-wait", o.MaxRequestsWait, "How long a request over --web.max-requests waits for a slot before it gets 503; at most --web.max-requests wait, more get 503 at once.")
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
