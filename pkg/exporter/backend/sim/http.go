// The simulated backend's load control over HTTP:
// PUT /api/v1/sim/gpus/{gpu} with a JSON Load. Whoever wires the
// simulated backend registers it on the exporter's API routes, so that the
// exporter's HTTP surface never links the simulator.
//
// Every request is untrusted: a load change is decoded strictly and checked
// against the simulated GPU before anything changes; a refused one gets a
// 4xx naming the problem and is counted.

package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
)

// LoadSetter is the simulated backend as the load control sees it (a
// *Backend).
type LoadSetter interface {
	SetLoad(id string, l Load) error
}

// maxLoadBody bounds the body of a load change; the longest valid one is
// about 100 bytes.
const maxLoadBody = 4096

// LoadControl serves the load control of one simulated backend.
type LoadControl struct {
	sim LoadSetter
	// collect, when set, is called after a load change so that the next
	// scrape shows it without waiting a full interval.
	collect  func()
	rejected *prometheus.CounterVec
}

// NewLoadControl returns the load control of s. collect may be nil; reg, when not
// nil, receives the count of refused changes.
func NewLoadControl(s LoadSetter, collect func(), reg prometheus.Registerer) *LoadControl {
	c := &LoadControl{sim: s, collect: collect, rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gpuscale_exporter_sim_load_rejected_total",
		Help: "Simulated load changes (PUT /api/v1/sim/gpus/{gpu}) refused, by HTTP status: 400 invalid, 404 no such GPU, 413 body too large.",
	}, []string{"code"})}
	if reg != nil {
		reg.MustRegister(c.rejected)
	}
	return c
}

// RegisterRoutes adds PUT /api/v1/sim/gpus/{gpu} to api.
func (ctl *LoadControl) RegisterRoutes(api gin.IRoutes) {
	api.PUT("/api/v1/sim/gpus/:gpu", ctl.put)
}

func (ctl *LoadControl) put(c *gin.Context) {
	reject := func(status int, err error) {
		ctl.rejected.WithLabelValues(strconv.Itoa(status)).Inc()
		c.JSON(status, gin.H{"error": err.Error()})
	}
	l, status, err := decodeLoad(c.Writer, c.Request)
	if err != nil {
		reject(status, err)
		return
	}
	if err := ctl.sim.SetLoad(c.Param("gpu"), l); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, ErrUnknownGPU) {
			status = http.StatusNotFound
		}
		reject(status, err)
		return
	}
	if ctl.collect != nil {
		ctl.collect()
	}
	c.Status(http.StatusNoContent)
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
func decodeLoad(w http.ResponseWriter, req *http.Request) (Load, int, error) {
	dec := json.NewDecoder(http.MaxBytesReader(w, req.Body, maxLoadBody))
	dec.DisallowUnknownFields()
	var l *Load
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
		return Load{}, http.StatusRequestEntityTooLarge, fmt.Errorf("invalid body: larger than %d bytes", tooLarge.Limit)
	case errors.Is(err, io.EOF):
		err = errEmptyBody
	}
	return Load{}, http.StatusBadRequest, fmt.Errorf("invalid body: %w", err)
}

func isSyntaxError(err error) bool {
	var se *json.SyntaxError
	return errors.As(err, &se)
}
