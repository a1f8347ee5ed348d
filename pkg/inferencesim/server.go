package inferencesim

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// DefaultModel is the model name servers report unless told otherwise.
const DefaultModel = "meta-llama/Llama-3.1-8B-Instruct"

// Options configure a Server. The zero value is a vLLM server of
// DefaultModel with DefaultProfile, no load, on the wall clock.
type Options struct {
	Dialect Dialect
	Model   string
	// Profile is the replica's performance; DefaultProfile when zero.
	Profile Profile
	// Seed makes the generated load reproducible.
	Seed uint64
	// Rate is the initial arrival rate in requests per second.
	Rate float64
	// Sizes draws request sizes; FixedSizes(DefaultRequest) when nil.
	Sizes Sizes
	// TTFTBuckets overrides the dialect's TTFT bucket layout, in the
	// dialect's unit (milliseconds for Triton), as the real servers allow.
	TTFTBuckets []float64
	// Now is the clock the simulation follows; time.Now when nil.
	Now func() time.Time
	// Interval is how often Run advances the simulation; 50ms when zero.
	Interval time.Duration
	Logger   *slog.Logger
	// Collectors are served on /metrics beside the dialect's series (the
	// binary's gpuscale_build_info, say).
	Collectors []prometheus.Collector
}

// Server is one simulated inference server: an Engine fed by a Load, whose
// state a dialect's Prometheus metrics expose over HTTP. Every method is
// safe for concurrent use.
type Server struct {
	opts    Options
	now     func() time.Time
	log     *slog.Logger
	metrics http.Handler
	mux     *http.ServeMux

	mu     sync.Mutex
	engine *Engine
	load   *Load
	x      *exposition
	last   Stats // what x last saw
	// The HTTP API's own busy-fraction window, so that curl does not
	// disturb the window of whoever calls Stats.
	apiWindowAt   time.Time
	apiWindowBusy time.Duration
}

// NewServer builds a server from opts.
func NewServer(opts Options) (*Server, error) {
	if err := opts.complete(); err != nil {
		return nil, err
	}
	engine, err := NewEngine(opts.Profile, opts.Now)
	if err != nil {
		return nil, err
	}
	if err := validateSizes(opts.Sizes, opts.Profile); err != nil {
		return nil, err
	}
	load := NewLoad(opts.Seed, opts.Sizes)
	if err := load.SetRate(engine.Now(), opts.Rate); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	for _, c := range opts.Collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inferencesim: register collector: %w", err)
		}
	}
	x, err := newExposition(opts.Dialect, opts.Model, opts.TTFTBuckets, reg)
	if err != nil {
		return nil, err
	}
	s := &Server{
		opts: opts, now: opts.Now, log: opts.Logger,
		engine: engine, load: load, x: x,
		apiWindowAt: engine.Now(),
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			ErrorHandling:     promhttp.ContinueOnError,
			EnableOpenMetrics: true,
		}),
	}
	engine.SetHooks(Hooks{Admitted: x.observeQueue, FirstToken: x.observeTTFT, Finished: x.observeFinished, Token: x.observeToken})
	s.last = engine.Peek()
	x.update(Stats{}, s.last)
	s.mux = s.routes()
	return s, nil
}

func (o *Options) complete() error {
	if o.Dialect == "" {
		o.Dialect = VLLM
	}
	if _, err := ParseDialect(string(o.Dialect)); err != nil {
		return err
	}
	if o.Model == "" {
		o.Model = DefaultModel
	}
	if o.Profile == (Profile{}) {
		o.Profile = DefaultProfile()
	}
	if o.Sizes == nil {
		o.Sizes = FixedSizes(DefaultRequest)
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Interval <= 0 {
		o.Interval = 50 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return validBuckets(o.TTFTBuckets)
}

// Dialect returns the dialect the server speaks.
func (s *Server) Dialect() Dialect { return s.opts.Dialect }

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Run advances the simulation every Options.Interval until ctx is done.
// Scrapes and API calls advance it too, so Run only keeps the catch-up work
// of each call small.
func (s *Server) Run(ctx context.Context) error {
	t := time.NewTicker(s.opts.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.Advance()
		}
	}
}

// Advance runs the simulation up to the clock's now.
func (s *Server) Advance() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
}

func (s *Server) advanceLocked() {
	s.load.Drive(s.engine, s.now())
	cur := s.engine.Peek()
	s.x.update(s.last, cur)
	s.last = cur
}

// Stats advances the simulation and returns the engine's state, starting a
// new busy-fraction window (see Engine.Stats).
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	return s.engine.Stats()
}

// Rate returns the arrival rate in requests per second.
func (s *Server) Rate() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.load.Rate()
}

// SetRate changes the arrival rate from now on.
func (s *Server) SetRate(rate float64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	if err := s.load.SetRate(s.engine.Now(), rate); err != nil {
		return err
	}
	s.log.Info("load changed", "rate", rate)
	return nil
}

// SetSizes changes the size distribution of generated requests.
func (s *Server) SetSizes(sizes Sizes) error {
	if err := validateSizes(sizes, s.opts.Profile); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	s.load.SetSizes(sizes)
	return nil
}

// Submit enqueues explicit requests arriving now, besides the generated
// load. It accepts all of them or, if any is invalid, none.
func (s *Server) Submit(reqs ...Request) error {
	for i, r := range reqs {
		if err := r.Validate(s.opts.Profile); err != nil {
			return fmt.Errorf("request %d: %w", i, err)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	for _, r := range reqs {
		if err := s.engine.SubmitAt(s.engine.Now(), r); err != nil {
			return err // unreachable: validated above
		}
	}
	s.advanceLocked()
	return nil
}

// SubmitNotify enqueues one request arriving now and calls onFirstToken
// with its time to first token when the simulation emits it. The call
// happens while the server is locked: it must not call back into s.
func (s *Server) SubmitNotify(r Request, onFirstToken func(ttft time.Duration)) error {
	if err := r.Validate(s.opts.Profile); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	if err := s.engine.SubmitNotify(s.engine.Now(), r, onFirstToken); err != nil {
		return err // unreachable: validated above
	}
	s.advanceLocked()
	return nil
}

// InFlight advances the simulation and returns how many requests are
// waiting or running, without starting a new busy-fraction window. A
// draining server stops once it reaches zero.
func (s *Server) InFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	st := s.engine.Peek()
	return st.Waiting + st.Running
}
