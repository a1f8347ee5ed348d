package inferencesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
)

// maxBodyBytes bounds request bodies; a trace replay batch of requests is
// the largest expected.
const maxBodyBytes = 8 << 20

// LoadView is the body of GET and PUT /api/v1/load. The token counts are
// set when every generated request has the same size.
type LoadView struct {
	Rate            float64    `json:"rate"`
	ContextTokens   int        `json:"contextTokens,omitempty"`
	GeneratedTokens int        `json:"generatedTokens,omitempty"`
	Stats           *StatsView `json:"stats,omitempty"`
}

// StatsView is the engine's state in the HTTP API. BusyFraction covers the
// time since the previous GET /api/v1/load.
type StatsView struct {
	Waiting           int     `json:"waiting"`
	Running           int     `json:"running"`
	KVCacheUsage      float64 `json:"kvCacheUsage"`
	KVCacheUsedTokens int     `json:"kvCacheUsedTokens"`
	BusyFraction      float64 `json:"busyFraction"`
	BusySeconds       float64 `json:"busySeconds"`
	Submitted         uint64  `json:"submitted"`
	Rejected          uint64  `json:"rejected"`
	Completed         uint64  `json:"completed"`
	Preemptions       uint64  `json:"preemptions"`
	PromptTokens      uint64  `json:"promptTokens"`
	GenerationTokens  uint64  `json:"generationTokens"`
}

// loadChange is the body of PUT /api/v1/load; absent fields are unchanged.
type loadChange struct {
	Rate            *float64 `json:"rate"`
	ContextTokens   *int     `json:"contextTokens"`
	GeneratedTokens *int     `json:"generatedTokens"`
}

func (s *Server) routes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		// Gauges show the engine at scrape time, not at the last tick.
		s.Advance()
		s.metrics.ServeHTTP(w, r)
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /api/v1/load", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, s.loadView(true))
	})
	mux.HandleFunc("PUT /api/v1/load", s.putLoad)
	mux.HandleFunc("POST /api/v1/requests", s.postRequests)
	return mux
}

func (s *Server) putLoad(w http.ResponseWriter, r *http.Request) {
	var c loadChange
	if err := decodeJSON(w, r, &c); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if c.Rate == nil && c.ContextTokens == nil && c.GeneratedTokens == nil {
		writeError(w, http.StatusBadRequest, errors.New("body sets none of rate, contextTokens, generatedTokens"))
		return
	}
	if err := s.applyLoadChange(c); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusOK, s.loadView(false))
}

// applyLoadChange validates the whole change before applying any of it.
func (s *Server) applyLoadChange(c loadChange) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var sizes Sizes
	if c.ContextTokens != nil || c.GeneratedTokens != nil {
		size := DefaultRequest
		if f, ok := s.load.Sizes().(FixedSizes); ok {
			size = Request(f)
		}
		if c.ContextTokens != nil {
			size.ContextTokens = *c.ContextTokens
		}
		if c.GeneratedTokens != nil {
			size.GeneratedTokens = *c.GeneratedTokens
		}
		if err := size.Validate(s.opts.Profile); err != nil {
			return err
		}
		sizes = FixedSizes(size)
	}
	s.advanceLocked()
	if c.Rate != nil {
		if err := s.load.SetRate(s.engine.Now(), *c.Rate); err != nil {
			return err
		}
	}
	if sizes != nil {
		s.load.SetSizes(sizes)
	}
	s.log.Info("load changed", "rate", s.load.Rate(), "sizes", s.load.Sizes())
	return nil
}

func (s *Server) postRequests(w http.ResponseWriter, r *http.Request) {
	var reqs []Request
	if err := decodeJSON(w, r, &reqs); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if len(reqs) == 0 {
		writeError(w, http.StatusBadRequest, errors.New("body holds no requests"))
		return
	}
	if err := s.Submit(reqs...); err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	writeJSON(w, http.StatusAccepted, map[string]int{"accepted": len(reqs)})
}

// loadView advances the simulation and describes the load. withStats adds
// the engine's state and starts a new API busy-fraction window.
func (s *Server) loadView(withStats bool) LoadView {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	v := LoadView{Rate: s.load.Rate()}
	if f, ok := s.load.Sizes().(FixedSizes); ok {
		v.ContextTokens, v.GeneratedTokens = f.ContextTokens, f.GeneratedTokens
	}
	if !withStats {
		return v
	}
	st := s.engine.Peek()
	var busy float64
	if window := st.Now.Sub(s.apiWindowAt); window > 0 {
		busy = float64(st.BusyTime-s.apiWindowBusy) / float64(window)
	}
	s.apiWindowAt, s.apiWindowBusy = st.Now, st.BusyTime
	v.Stats = &StatsView{
		Waiting: st.Waiting, Running: st.Running,
		KVCacheUsage: st.KVCacheUsage, KVCacheUsedTokens: st.KVCacheUsedTokens,
		BusyFraction: busy, BusySeconds: st.BusyTime.Seconds(),
		Submitted: st.Submitted, Rejected: st.Rejected, Completed: st.Completed,
		Preemptions: st.Preemptions, PromptTokens: st.PromptTokens, GenerationTokens: st.GenerationTokens,
	}
	return v
}

// decodeJSON reads exactly one JSON value with no unknown fields.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("invalid JSON body: %w", err)
	}
	if dec.More() {
		return errors.New("invalid JSON body: more than one value")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, map[string]string{"error": err.Error()})
}
