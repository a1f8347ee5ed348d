package inferencesim

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidRequest is wrapped by the errors Submit returns for requests the
// engine can never serve.
var ErrInvalidRequest = errors.New("invalid request")

// Request is one inference request: a prompt of ContextTokens tokens that
// generates GeneratedTokens tokens.
type Request struct {
	ContextTokens   int `json:"contextTokens"`
	GeneratedTokens int `json:"generatedTokens"`
	// KVReady says the prompt's KV cache arrives with the request, computed
	// by a prefill replica and transferred (prefill/decode
	// disaggregation): a decode replica admits it without prefilling and
	// emits its first token at the end of its first step. A request
	// preempted after admission recomputes its prompt as any other.
	KVReady bool `json:"kvReady,omitempty"`
}

// Validate reports whether a replica with profile p can ever serve r. A
// request larger than the whole KV cache would wait at the head of the
// queue forever, so it is rejected up front, as vLLM rejects prompts longer
// than max_model_len.
func (r Request) Validate(p Profile) error {
	switch {
	case r.ContextTokens < 1:
		return fmt.Errorf("%w: contextTokens must be at least 1, got %d", ErrInvalidRequest, r.ContextTokens)
	case r.GeneratedTokens < 1:
		return fmt.Errorf("%w: generatedTokens must be at least 1, got %d", ErrInvalidRequest, r.GeneratedTokens)
	case r.ContextTokens > p.KVCacheTokens-r.GeneratedTokens:
		return fmt.Errorf("%w: %d context + %d generated tokens exceed the KV cache of %d tokens",
			ErrInvalidRequest, r.ContextTokens, r.GeneratedTokens, p.KVCacheTokens)
	}
	return nil
}

// Hooks receive per-request events as the engine produces them, at the
// simulated instant they happen. Nil hooks are skipped.
type Hooks struct {
	// Admitted is called when a request first joins the running batch,
	// with the time it waited in the queue.
	Admitted func(wait time.Duration)
	// FirstToken is called when a request's first token is emitted, with
	// its time to first token.
	FirstToken func(ttft time.Duration)
	// Finished is called when a request has generated all its tokens.
	Finished func(c Completion)
	// Token is called for every output token after a request's first,
	// with the time since its previous one: the inter-token latency vLLM
	// and SGLang observe per token.
	Token func(gap time.Duration)
}

// Completion is a finished request and how long each of its phases took.
type Completion struct {
	Request
	// Queued is the time from arrival to admission into the batch,
	// FirstToken from arrival to the first token, Total from arrival to
	// the last token.
	Queued, FirstToken, Total time.Duration
}

// Stats is the engine's state at one simulated instant.
type Stats struct {
	Now               time.Time
	Waiting           int // requests in the queue, preempted ones included
	Running           int // requests in the batch, prefilling or decoding
	KVCacheUsedTokens int
	KVCacheUsage      float64 // KVCacheUsedTokens / Profile.KVCacheTokens
	// BusyFraction is the share of simulated time with a non-empty batch
	// since the previous call to Stats (since the engine started for the
	// first call). Peek reports it without starting a new window.
	BusyFraction float64
	// BusyTime is the total simulated time with a non-empty batch. Several
	// readers can each derive their own busy fraction from its increase.
	BusyTime time.Duration

	Submitted        uint64 // requests accepted by Submit
	Rejected         uint64 // requests Submit refused
	Completed        uint64
	Preemptions      uint64
	PromptTokens     uint64 // prompt tokens prefilled, recomputation included
	GenerationTokens uint64
	// Aborted counts requests dropped unfinished by Abort.
	Aborted uint64
}

// Engine simulates one continuous-batching inference engine in simulated
// time. It has no goroutines and never reads the wall clock: time moves only
// when Advance, Submit or SubmitAt is called. It is not safe for concurrent
// use.
type Engine struct {
	p     Profile
	clock func() time.Time
	hooks Hooks

	now     time.Time
	waiting fifo
	running []*seq // in admission order; the newest is preempted first
	kvUsed  int

	// The in-flight step: its batch was fixed when it started and its
	// tokens appear when it ends.
	inFlight bool
	stepEnd  time.Time

	busy        time.Duration
	windowStart time.Time
	windowBusy  time.Duration

	submitted, rejected, completed, preemptions uint64
	promptTokens, generationTokens              uint64
	aborted                                     uint64
}

// seq is one request inside the engine.
type seq struct {
	req     Request
	arrival time.Time
	// target is how many prompt tokens must be prefilled before the next
	// token: the context, or context plus generated tokens after a
	// recompute preemption.
	target    int
	prefilled int
	generated int
	kvHeld    int
	chunk     int  // prefill tokens in the in-flight step
	decoding  bool // decodes one token in the in-flight step
	admitted  bool
	sawFirst  bool
	// lastToken is when the request's newest token was emitted.
	lastToken time.Time
	// queued and firstToken are the times to admission and to the first
	// token, once reached.
	queued, firstToken time.Duration
	// follow hears this request's events.
	follow Follow
}

// NewEngine returns an idle engine whose simulated time starts at clock().
// Submit stamps arrivals with clock(); tests pass a fake clock.
func NewEngine(p Profile, clock func() time.Time) (*Engine, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if clock == nil {
		clock = time.Now
	}
	start := clock()
	return &Engine{p: p, clock: clock, now: start, windowStart: start}, nil
}

// SetHooks replaces the engine's event hooks.
func (e *Engine) SetHooks(h Hooks) { e.hooks = h }

// Profile returns the engine's performance profile.
func (e *Engine) Profile() Profile { return e.p }

// Now returns the simulated instant the engine has reached.
func (e *Engine) Now() time.Time { return e.now }

// Submit enqueues r as arriving at clock().
func (e *Engine) Submit(r Request) error { return e.SubmitAt(e.clock(), r) }

// SubmitAt runs the engine up to at and enqueues r as arriving then. An
// instant before the engine's time counts as its time: the engine cannot
// have seen the request earlier.
func (e *Engine) SubmitAt(at time.Time, r Request) error {
	return e.SubmitNotify(at, r, nil)
}

// SubmitNotify is SubmitAt for a caller that follows this one request:
// onFirstToken, if not nil, is called with the request's time to first
// token from within the call that emits it (Advance, or a later Submit).
// Trace replays use it to measure every request, not a histogram of them.
func (e *Engine) SubmitNotify(at time.Time, r Request, onFirstToken func(ttft time.Duration)) error {
	return e.SubmitFollow(at, r, Follow{FirstToken: onFirstToken})
}

// Follow are the events of one request a caller hears, each called from
// within the engine call that produces it; they must not call back into
// the engine. Nil fields are skipped.
type Follow struct {
	// FirstToken hears the request's time to first token.
	FirstToken func(ttft time.Duration)
	// Aborted hears that Abort dropped the request unfinished; streamed
	// says it had emitted its first token, so its stream was cut mid-way.
	Aborted func(streamed bool)
	// Token hears the gap before each of its tokens after the first.
	Token func(gap time.Duration)
	// Finished hears its completion.
	Finished func(c Completion)
}

// SubmitFollow is SubmitNotify with every event of the request followed:
// replays of disaggregated serving hand a request from its prefill replica
// to a decode replica when it finishes and measure its token gaps; replays
// of scale-down count the streams a killed replica cuts.
func (e *Engine) SubmitFollow(at time.Time, r Request, f Follow) error {
	if err := r.Validate(e.p); err != nil {
		e.rejected++
		return err
	}
	e.Advance(at)
	s := &seq{req: r, arrival: e.now, target: r.ContextTokens, follow: f}
	if r.KVReady {
		s.prefilled = r.ContextTokens
	}
	e.waiting.pushBack(s)
	e.submitted++
	return nil
}

// Advance runs every step that ends by to. A step still running at to keeps
// its batch and finishes in a later call; requests submitted meanwhile join
// the step after it, as in vLLM's scheduler.
func (e *Engine) Advance(to time.Time) {
	for e.now.Before(to) {
		if !e.inFlight && !e.plan() {
			e.now = to
			return
		}
		if e.stepEnd.After(to) {
			e.addBusy(to.Sub(e.now))
			e.now = to
			return
		}
		e.addBusy(e.stepEnd.Sub(e.now))
		e.now = e.stepEnd
		e.finishStep()
	}
}

// Stats returns the engine's state and starts a new busy-fraction window.
func (e *Engine) Stats() Stats {
	s := e.Peek()
	e.windowStart, e.windowBusy = e.now, 0
	return s
}

// Peek returns the engine's state without starting a new busy-fraction
// window.
func (e *Engine) Peek() Stats {
	s := Stats{
		Now:               e.now,
		Waiting:           e.waiting.len(),
		Running:           len(e.running),
		KVCacheUsedTokens: e.kvUsed,
		KVCacheUsage:      float64(e.kvUsed) / float64(e.p.KVCacheTokens),
		BusyTime:          e.busy,
		Submitted:         e.submitted,
		Rejected:          e.rejected,
		Completed:         e.completed,
		Preemptions:       e.preemptions,
		PromptTokens:      e.promptTokens,
		GenerationTokens:  e.generationTokens,
		Aborted:           e.aborted,
	}
	if window := e.now.Sub(e.windowStart); window > 0 {
		s.BusyFraction = min(1, float64(e.windowBusy)/float64(window))
	}
	return s
}

func (e *Engine) addBusy(d time.Duration) {
	e.busy += d
	e.windowBusy += d
}

// plan starts a step at e.now: it makes KV room for this step's tokens,
// splits the step's prefill budget among the prefilling requests in
// admission order, and admits waiting requests while budget is left, as
// vLLM's scheduler does with its token budget. A request that would get no
// prefill work this step stays in the queue, so the queue length shows
// prefill saturation. plan reports false when there is nothing to run.
func (e *Engine) plan() bool {
	e.makeRoom()
	// The budget comes from the batch before admission: letting each
	// admission lengthen the step would buy every new request a token.
	budget := e.p.prefillBudget(e.p.stepTime(max(1, len(e.running))))
	for _, s := range e.running {
		if rest := s.target - s.prefilled; rest > 0 {
			s.chunk = min(rest, budget)
			budget -= s.chunk
		} else {
			s.decoding = true
		}
	}
	e.admit(budget)
	if len(e.running) == 0 {
		return false
	}
	e.inFlight, e.stepEnd = true, e.now.Add(e.p.stepTime(len(e.running)))
	return true
}

// makeRoom preempts the newest running requests until every running request
// can store one more token, as vLLM's recompute preemption does. The oldest
// request is never preempted: Validate guarantees it fits alone.
func (e *Engine) makeRoom() {
	for len(e.running) > 1 && e.kvUsed+len(e.running) > e.p.KVCacheTokens {
		last := len(e.running) - 1
		s := e.running[last]
		e.running[last] = nil
		e.running = e.running[:last]
		e.kvUsed -= s.kvHeld
		s.kvHeld, s.prefilled = 0, 0
		s.target = s.req.ContextTokens + s.generated
		e.waiting.pushFront(s)
		e.preemptions++
	}
}

// admit moves requests from the head of the queue into the batch while
// prefill budget (for a request with a prompt to prefill: not one whose KV
// arrived computed), a batch slot and KV room for the request's prompt and
// first token remain, and gives each its first chunk. Admission is strictly
// first come, first served: a head that does not fit blocks those behind it.
func (e *Engine) admit(budget int) {
	for e.waiting.len() > 0 && len(e.running) < e.p.MaxBatch {
		s := e.waiting.front()
		if budget <= 0 && s.prefilled < s.target {
			return // no prefill work left this step for it
		}
		if e.kvUsed+len(e.running)+s.target+1 > e.p.KVCacheTokens {
			return
		}
		e.waiting.popFront()
		s.kvHeld = s.target
		e.kvUsed += s.target
		if rest := s.target - s.prefilled; rest > 0 {
			s.chunk = min(rest, budget)
			budget -= s.chunk
		} else {
			s.decoding = true // its KV arrived computed
		}
		e.running = append(e.running, s)
		if !s.admitted {
			s.admitted = true
			s.queued = e.now.Sub(s.arrival)
			if e.hooks.Admitted != nil {
				e.hooks.Admitted(s.queued)
			}
		}
	}
}

// finishStep applies the in-flight step at its end: prefill progress,
// one token for each decoding request and for each request whose prefill
// completed, and the release of finished requests.
func (e *Engine) finishStep() {
	e.inFlight = false
	kept := e.running[:0]
	for _, s := range e.running {
		switch {
		case s.chunk > 0:
			s.prefilled += s.chunk
			e.promptTokens += uint64(s.chunk)
			if s.prefilled == s.target {
				e.emit(s)
			}
		case s.decoding:
			e.emit(s)
		}
		s.chunk, s.decoding = 0, false
		if s.generated >= s.req.GeneratedTokens {
			e.kvUsed -= s.kvHeld
			e.completed++
			c := Completion{Request: s.req, Queued: s.queued, FirstToken: s.firstToken, Total: e.now.Sub(s.arrival)}
			if e.hooks.Finished != nil {
				e.hooks.Finished(c)
			}
			if s.follow.Finished != nil {
				s.follow.Finished(c)
			}
			continue
		}
		kept = append(kept, s)
	}
	clear(e.running[len(kept):])
	e.running = kept
}

func (e *Engine) emit(s *seq) {
	s.generated++
	s.kvHeld++
	e.kvUsed++
	e.generationTokens++
	if s.sawFirst {
		gap := e.now.Sub(s.lastToken)
		if e.hooks.Token != nil {
			e.hooks.Token(gap)
		}
		if s.follow.Token != nil {
			s.follow.Token(gap)
		}
	}
	s.lastToken = e.now
	if !s.sawFirst {
		s.sawFirst = true
		s.firstToken = e.now.Sub(s.arrival)
		if s.follow.FirstToken != nil {
			s.follow.FirstToken(s.firstToken)
		}
		if e.hooks.FirstToken != nil {
			e.hooks.FirstToken(s.firstToken)
		}
	}
}

// fifo is the waiting queue. Preempted requests go back to its head.
type fifo struct {
	items []*seq
	head  int
}

func (q *fifo) len() int        { return len(q.items) - q.head }
func (q *fifo) front() *seq     { return q.items[q.head] }
func (q *fifo) pushBack(s *seq) { q.items = append(q.items, s) }

func (q *fifo) popFront() {
	q.items[q.head] = nil
	q.head++
	if q.head >= 64 && q.head*2 >= len(q.items) {
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

func (q *fifo) pushFront(s *seq) {
	if q.head > 0 {
		q.head--
		q.items[q.head] = s
		return
	}
	q.items = append([]*seq{s}, q.items...)
}
