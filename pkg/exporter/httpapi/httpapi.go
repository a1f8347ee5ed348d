// Package httpapi is the exporter's HTTP surface: Prometheus metrics, health
// probes, a JSON view of the GPUs and, on the simulated backend, the load
// control. Every handler reads the collector's latest snapshot; none of them
// reaches the GPU or the kubelet.
//
// Every request is untrusted: the number served at once is bounded, for
// scrapes and for the API apart (Config.MaxRequests), and a load change is decoded strictly and checked
// against the simulated GPU before anything changes; a refused one gets a
// 4xx naming the problem and is counted.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/gpu"
	"github.com/gpuscale/gpuscale/pkg/gpu/sim"
)

// SnapshotSource is the collector as the handlers see it.
type SnapshotSource interface {
	Snapshot() *exporter.Snapshot
	Healthy() (bool, time.Duration)
}

// LoadSetter is implemented by the simulated backend.
type LoadSetter interface {
	SetLoad(id string, l sim.Load) error
}

// Config wires the handlers.
type Config struct {
	Source   SnapshotSource
	Gatherer prometheus.Gatherer
	Hostname string
	// Sim, when set, enables PUT /api/v1/sim/gpus/{gpu}.
	Sim LoadSetter
	// Collect, when set, is called after a simulated load change so the next
	// scrape shows it without waiting a full interval.
	Collect func()
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

// maxLoadBody bounds the body of a load change; the longest valid one is
// about 100 bytes.
const maxLoadBody = 4096

// ownMetrics are the HTTP surface's metrics about itself.
type ownMetrics struct {
	refused     *prometheus.CounterVec
	simRejected *prometheus.CounterVec
}

func newOwnMetrics(r prometheus.Registerer) *ownMetrics {
	m := &ownMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_http_requests_refused_total",
			Help: "Requests answered 503 because --web.max-requests of their kind (metrics: /metrics, api: /api/) were in flight and no slot freed within --web.max-requests-wait.",
		}, []string{"handler"}),
		simRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_sim_load_rejected_total",
			Help: "Simulated load changes (PUT /api/v1/sim/gpus/{gpu}) refused, by HTTP status: 400 invalid, 404 no such GPU, 413 body too large.",
		}, []string{"code"}),
	}
	// Both series from the start: a refusal must show as an increase.
	m.refused.WithLabelValues("metrics")
	m.refused.WithLabelValues("api")
	if r != nil {
		r.MustRegister(m.refused, m.simRejected)
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

	// promhttp's own MaxRequestsInFlight would refuse at once; the limiter
	// above queues briefly instead.
	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: true,
	})
	scrapes.GET("/metrics", gin.WrapH(metrics))
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
	if cfg.Sim != nil {
		api.PUT("/api/v1/sim/gpus/:gpu", simHandler(cfg, own.simRejected))
	}
	return r
}

func simHandler(cfg Config, rejected *prometheus.CounterVec) gin.HandlerFunc {
	return func(c *gin.Context) {
		reject := func(status int, err error) {
			rejected.WithLabelValues(strconv.Itoa(status)).Inc()
			c.JSON(status, gin.H{"error": err.Error()})
		}
		l, status, err := decodeLoad(c.Writer, c.Request)
		if err != nil {
			reject(status, err)
			return
		}
		if err := cfg.Sim.SetLoad(c.Param("gpu"), l); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, sim.ErrUnknownGPU) {
				status = http.StatusNotFound
			}
			reject(status, err)
			return
		}
		if cfg.Collect != nil {
			cfg.Collect()
		}
		c.Status(http.StatusNoContent)
	}
}

// Reasons a load change's body is refused, beyond encoding/json's own.
var (
	errEmptyBody    = errors.New(`empty; want a JSON object such as {"utilization": 50}`)
	errNullBody     = errors.New(`null; want a JSON object such as {"utilization": 50}`)
	errTrailingData = errors.New("data after the JSON object; send exactly one object")
)

// decodeLoad reads a load change strictly: one JSON object of known fields
// and nothing after it but white space, within maxLoadBody bytes. On error
// it returns the status to answer with.
func decodeLoad(w http.ResponseWriter, req *http.Request) (sim.Load, int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxLoadBody))
	dec.DisallowUnknownFields()
	var l *sim.Load
	err := dec.Decode(&l)
	if err == nil {
		// Decode stops after the first value: whatever follows must be
		// refused, not silently ignored.
		switch _, terr := dec.Token(); {
		case l == nil:
			err = errNullBody
		case errors.Is(terr, io.EOF):
			return *l, 0, nil
		case terr == nil || isSyntaxError(terr):
			err = errTrailingData
		default:
			err = terr
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return sim.Load{}, http.StatusRequestEntityTooLarge, fmt.Errorf("invalid body: larger than %d bytes", tooLarge.Limit)
	case errors.Is(err, io.EOF):
		err = errEmptyBody
	}
	return sim.Load{}, http.StatusBadRequest, fmt.Errorf("invalid body: %w", err)
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
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
	v := NodeView{Time: s.Time, Hostname: hostname, Backend: s.Backend, Simulated: s.Backend == "sim",
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
