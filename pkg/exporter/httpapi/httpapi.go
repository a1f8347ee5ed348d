// Package httpapi is the exporter's HTTP surface: Prometheus metrics, health
// probes, a JSON view of the GPUs and whatever API routes its wiring adds
// (the simulated backend's load control, package simhttp). Every handler reads the collector's latest snapshot; none of them
// reaches the GPU or the kubelet.
//
// Every request is untrusted: the number served at once is bounded, for
// scrapes and for the API apart (Config.MaxRequests).
package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// SnapshotSource is the collector as the handlers see it. /metrics serves
// its snapshot's encoded GPU series after Config.Gatherer's, which must
// not hold the collector itself.
type SnapshotSource interface {
	Snapshot() *exporter.Snapshot
	Healthy() (bool, time.Duration)
}

// Routes adds handlers to the API group, under its request bound. The
// simulated backend's load control is one, registered by whoever wires
// that backend.
type Routes interface {
	RegisterRoutes(api gin.IRoutes)
}

// Config wires the handlers.
type Config struct {
	Source   SnapshotSource
	Gatherer prometheus.Gatherer
	Hostname string
	// APIRoutes are more API handlers, served beside GET /api/v1/gpus.
	APIRoutes []Routes
	// MaxRequests bounds the /metrics requests served at once, and on its
	// own the API requests, so that no use of the API can starve scrapes.
	// Probes are exempt: they are constant-time, and refusing them would
	// get the pod restarted. Zero means no bound.
	MaxRequests int
	// MaxRequestsWait is how long a request over MaxRequests waits for a
	// slot before it is refused with 503. At most MaxRequests wait; more
	// are refused at once. Zero refuses at once.
	MaxRequestsWait time.Duration
	// Registerer receives the handlers' own metrics; nil skips them.
	Registerer prometheus.Registerer
}

// ownMetrics are the HTTP surface's metrics about itself.
type ownMetrics struct {
	refused *prometheus.CounterVec
}

func newOwnMetrics(r prometheus.Registerer) *ownMetrics {
	m := &ownMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_http_requests_refused_total",
			Help: "Requests answered 503 because --web.max-requests of their kind (metrics: /metrics, api: /api/) were in flight and no slot freed within --web.max-requests-wait.",
		}, []string{"handler"}),
	}
	// Both series from the start: a refusal must show as an increase.
	m.refused.WithLabelValues("metrics")
	m.refused.WithLabelValues("api")
	if r != nil {
		r.MustRegister(m.refused)
	}
	return m
}

// New returns the exporter's routes.
func New(cfg Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.HandleMethodNotAllowed = true
	own := newOwnMetrics(cfg.Registerer)
	scrapes, api := r.Group(""), r.Group("")
	if cfg.MaxRequests > 0 {
		scrapes.Use(newLimiter(cfg.MaxRequests, cfg.MaxRequestsWait, own.refused.WithLabelValues("metrics")).handler())
		api.Use(newLimiter(cfg.MaxRequests, cfg.MaxRequestsWait, own.refused.WithLabelValues("api")).handler())
	}

	// The limiter above queues briefly where promhttp's own
	// MaxRequestsInFlight would refuse at once.
	scrapes.GET("/metrics", gin.WrapH(newMetricsHandler(cfg.Gatherer, cfg.Source)))
	r.GET("/healthz", func(c *gin.Context) {
		ok, age := cfg.Source.Healthy()
		if !ok && cfg.Source.Snapshot() == nil {
			c.String(http.StatusServiceUnavailable, "unhealthy: no successful collection yet\n")
			return
		}
		if !ok {
			c.String(http.StatusServiceUnavailable, "unhealthy: last successful collection %s ago\n", age.Round(time.Millisecond))
			return
		}
		c.String(http.StatusOK, "ok\n")
	})
	r.GET("/readyz", func(c *gin.Context) {
		if cfg.Source.Snapshot() == nil {
			c.String(http.StatusServiceUnavailable, "not ready: no successful collection yet\n")
			return
		}
		c.String(http.StatusOK, "ok\n")
	})
	api.GET("/api/v1/gpus", func(c *gin.Context) {
		s := cfg.Source.Snapshot()
		if s == nil {
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": "no successful collection yet"})
			return
		}
		c.JSON(http.StatusOK, render(s, cfg.Hostname))
	})
	for _, routes := range cfg.APIRoutes {
		routes.RegisterRoutes(api)
	}
	return r
}

// GPUView is one device in the JSON API.
type GPUView struct {
	Index     int                `json:"index"`
	UUID      string             `json:"uuid"`
	Device    string             `json:"device"`
	ModelName string             `json:"modelName"`
	PCIBusID  string             `json:"pciBusId"`
	MIG       *gpu.MIG           `json:"mig,omitempty"`
	Healthy   bool               `json:"healthy"`
	Error     string             `json:"error,omitempty"`
	Values    map[string]float64 `json:"values"`
	XIDCounts map[string]uint64  `json:"xidCounts,omitempty"`
	Pods      []PodView          `json:"pods"`
}

// PodView is a container holding a device.
type PodView struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Container string `json:"container"`
}

// NodeView is the body of GET /api/v1/gpus.
type NodeView struct {
	Time          time.Time `json:"time"`
	Hostname      string    `json:"hostname"`
	Backend       string    `json:"backend"`
	Simulated     bool      `json:"simulated"`
	DriverVersion string    `json:"driverVersion"`
	GPUs          []GPUView `json:"gpus"`
}

func render(s *exporter.Snapshot, hostname string) NodeView {
	v := NodeView{Time: s.Time, Hostname: hostname, Backend: s.Backend.String(), Simulated: s.Backend.Simulated(),
		DriverVersion: s.Driver, GPUs: make([]GPUView, 0, len(s.Devices))}
	for _, d := range s.Devices {
		r := d.Reading
		g := GPUView{Index: r.Device.Index, UUID: r.Device.UUID, Device: "nvidia" + strconv.Itoa(r.Device.Minor),
			ModelName: r.Device.ModelName, PCIBusID: r.Device.PCIBusID, MIG: r.Device.MIG,
			Healthy: r.Healthy(), Values: map[string]float64{}, Pods: []PodView{}}
		if r.Err != nil {
			g.Error = r.Err.Error()
		}
		for f := gpu.Field(0); f < gpu.NumFields; f++ {
			if val, ok := r.Get(f); ok {
				g.Values[f.String()] = val
			}
		}
		if len(r.XIDCounts) > 0 {
			g.XIDCounts = map[string]uint64{}
			for code, n := range r.XIDCounts {
				g.XIDCounts[strconv.FormatUint(code, 10)] = n
			}
		}
		for _, p := range d.Pods {
			g.Pods = append(g.Pods, PodView{Namespace: p.Namespace, Pod: p.Pod, Container: p.Container})
		}
		v.GPUs = append(v.GPUs, g)
	}
	return v
}
