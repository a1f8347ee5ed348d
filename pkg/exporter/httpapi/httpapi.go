// Package httpapi is the exporter's HTTP surface: Prometheus metrics, health
// probes, a JSON view of the GPUs and whatever API routes its wiring adds
// (the simulated backend's load control, sim.LoadControl). Every handler reads the collector's latest snapshot; none of them
// reaches the GPU or the kubelet.
//
// Every request is untrusted: the number served at once is bounded, for
// scrapes and for the API apart (Config.MaxRequests), and requests that
// carry the reserved lane's token (the adapter's) have slots of their own
// that no other client can take (Config.ReservedToken).
package httpapi

import (
	"crypto/subtle"
	"net/http"
	"strconv"
	"strings"
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
	// ReservedToken, when set, opens a reserved lane: a request with the
	// header "Authorization: Bearer <token>", where token is what
	// ReservedToken returns at the time, is served within
	// ReservedMaxRequests slots of its own (waiting up to
	// ReservedMaxRequestsWait), which no other request can take, so that
	// a flood of scrapes from anywhere in the cluster cannot make the
	// adapter's scrapes wait or fail. Any other token is an ordinary
	// request, and every request is while ReservedToken returns none (the
	// token's Secret does not exist yet: pkg/tokenfile).
	ReservedToken           func() []byte
	ReservedMaxRequests     int
	ReservedMaxRequestsWait time.Duration
	// Registerer receives the handlers' own metrics; nil skips them.
	Registerer prometheus.Registerer
}

// ownMetrics are the HTTP surface's metrics about itself.
type ownMetrics struct {
	refused  *prometheus.CounterVec
	inFlight *prometheus.GaugeVec
	renders  prometheus.Counter
}

func newOwnMetrics(r prometheus.Registerer) *ownMetrics {
	m := &ownMetrics{
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gpuscale_exporter_http_requests_refused_total",
			Help: "Requests answered 503 because --web.max-requests of their kind (metrics: /metrics, api: /api/; reserved: the reserved lane's, --web.reserved-max-requests) were in flight and no slot freed within the wait.",
		}, []string{"handler"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gpuscale_exporter_http_requests_in_flight",
			Help: "Requests being served, by limit (metrics, api, reserved); probes are not counted.",
		}, []string{"handler"}),
		renders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_exporter_scrape_renders_total",
			Help: "/metrics responses rendered: one per collection and response format (text or OpenMetrics, gzipped or not) asked for; every other scrape of the same collection is answered from it.",
		}),
	}
	// Every series from the start: a refusal must show as an increase.
	for _, h := range []string{"metrics", "api", "reserved"} {
		m.refused.WithLabelValues(h)
		m.inFlight.WithLabelValues(h)
	}
	if r != nil {
		r.MustRegister(m.refused, m.inFlight, m.renders)
	}
	return m
}

// lanes picks the limiter of each request: the reserved lane's for a
// request with its token, else the anonymous one of its group.
type lanes struct {
	token    func() []byte
	reserved *limiter
}

func (ls *lanes) middleware(anonymous *limiter) gin.HandlerFunc {
	anon := anonymous.handler()
	var res gin.HandlerFunc
	if ls.reserved != nil {
		res = ls.reserved.handler()
	}
	return func(c *gin.Context) {
		if res != nil && ls.holdsToken(c.Request) {
			res(c)
			return
		}
		if anon != nil {
			anon(c)
			return
		}
		c.Next()
	}
}

// holdsToken reports whether r bears the reserved lane's current token,
// in constant time; never while there is none.
func (ls *lanes) holdsToken(r *http.Request) bool {
	auth := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok {
		return false
	}
	want := ls.token()
	return len(want) > 0 && subtle.ConstantTimeCompare([]byte(tok), want) == 1
}

// New returns the exporter's routes.
func New(cfg Config) http.Handler {
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Recovery())
	r.HandleMethodNotAllowed = true
	own := newOwnMetrics(cfg.Registerer)
	ls := &lanes{token: cfg.ReservedToken}
	if cfg.ReservedToken != nil {
		ls.reserved = newLimiter(max(1, cfg.ReservedMaxRequests), cfg.ReservedMaxRequestsWait,
			own.refused.WithLabelValues("reserved"), own.inFlight.WithLabelValues("reserved"))
	}
	var anonScrapes, anonAPI *limiter
	if cfg.MaxRequests > 0 {
		anonScrapes = newLimiter(cfg.MaxRequests, cfg.MaxRequestsWait, own.refused.WithLabelValues("metrics"), own.inFlight.WithLabelValues("metrics"))
		anonAPI = newLimiter(cfg.MaxRequests, cfg.MaxRequestsWait, own.refused.WithLabelValues("api"), own.inFlight.WithLabelValues("api"))
	}
	scrapes, api := r.Group(""), r.Group("")
	scrapes.Use(ls.middleware(anonScrapes))
	api.Use(ls.middleware(anonAPI))

	// The limiter above queues briefly where promhttp's own
	// MaxRequestsInFlight would refuse at once. Scrapes in flight share
	// one render per collection and format (renders).
	scrapes.GET("/metrics", gin.WrapH(newMetricsHandler(newRenders(cfg.Gatherer, own.renders), cfg.Source)))
	// Liveness: the process answers. A collection that is late or stuck
	// in the driver is readiness's to report, not a reason to restart:
	// a restart would not unstick the driver, and would lose the series
	// the exporter still serves.
	r.GET("/healthz", func(c *gin.Context) {
		c.String(http.StatusOK, "ok\n")
	})
	// Readiness: a collection no older than three intervals. A stale
	// exporter drops out of its Service until NVML answers again.
	r.GET("/readyz", func(c *gin.Context) {
		if cfg.Source.Snapshot() == nil {
			c.String(http.StatusServiceUnavailable, "not ready: no successful collection yet\n")
			return
		}
		if ok, age := cfg.Source.Healthy(); !ok {
			c.String(http.StatusServiceUnavailable, "not ready: last successful collection %s ago\n", age.Round(time.Millisecond))
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
