// Package httpapi is the exporter's HTTP surface: Prometheus metrics, health
// probes, a JSON view of the GPUs and, on the simulated backend, the load
// control. Every handler reads the collector's latest snapshot; none of them
// reaches the GPU or the kubelet.
package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
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
}

// New returns the exporter's routes.
func New(cfg Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.HandleMethodNotAllowed = true

	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 10,
		EnableOpenMetrics:   true,
	})
	r.GET("/metrics", gin.WrapH(metrics))
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
	r.GET("/api/v1/gpus", func(c *gin.Context) {
		s := cfg.Source.Snapshot()
		if s == nil {
			c.JSON(http.StatusServiceUnavailable, gin.H{"error": "no successful collection yet"})
			return
		}
		c.JSON(http.StatusOK, render(s, cfg.Hostname))
	})
	if cfg.Sim != nil {
		r.PUT("/api/v1/sim/gpus/:gpu", simHandler(cfg))
	}
	return r
}

func simHandler(cfg Config) gin.HandlerFunc {
	return func(c *gin.Context) {
		var l sim.Load
		dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, 4096))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&l); err != nil {
			c.JSON(http.StatusBadRequest, gin.H{"error": fmt.Sprintf("invalid body: %v", err)})
			return
		}
		if err := cfg.Sim.SetLoad(c.Param("gpu"), l); err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, sim.ErrUnknownGPU) {
				status = http.StatusNotFound
			}
			c.JSON(status, gin.H{"error": err.Error()})
			return
		}
		if cfg.Collect != nil {
			cfg.Collect()
		}
		c.Status(http.StatusNoContent)
	}
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
