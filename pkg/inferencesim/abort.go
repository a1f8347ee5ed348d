package inferencesim

// Aborted counts the requests one Abort dropped.
type Aborted struct {
	// Requests is every request dropped: queued, prefilling or decoding.
	Requests int
	// Streams is those of them that had emitted their first token: streams
	// cut mid-way rather than requests never answered.
	Streams int
}

// Abort drops every request the engine holds, as a killed server process
// does: queued, prefilling and decoding alike, none of them finishes and
// the step in flight produces nothing. The KV cache is freed. Simulated
// time does not move; the engine serves later submissions as an idle one.
func (e *Engine) Abort() Aborted {
	var out Aborted
	drop := func(s *seq) {
		out.Requests++
		if s.sawFirst {
			out.Streams++
		}
		if s.follow.Aborted != nil {
			s.follow.Aborted(s.sawFirst)
		}
	}
	for _, s := range e.running {
		drop(s)
	}
	for e.waiting.len() > 0 {
		drop(e.waiting.front())
		e.waiting.popFront()
	}
	clear(e.running)
	e.running = e.running[:0]
	e.kvUsed = 0
	e.inFlight = false
	e.aborted += uint64(out.Requests)
	return out
}

// SubmitFollow enqueues one request arriving now and tells f what becomes
// of it (see Follow). The calls happen while the server is locked: they
// must not call back into s.
func (s *Server) SubmitFollow(r Request, f Follow) error {
	if err := r.Validate(s.opts.Profile); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	if err := s.engine.SubmitFollow(s.engine.Now(), r, f); err != nil {
		return err // unreachable: validated above
	}
	s.advanceLocked()
	return nil
}

// Abort runs the simulation up to now, then drops every request the server
// holds, as when its process is killed (SIGKILL, or SIGTERM to a vLLM
// without --shutdown-timeout): see Engine.Abort. vLLM counts them under
// request_success_total{finished_reason="abort"}.
func (s *Server) Abort() Aborted {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.advanceLocked()
	out := s.engine.Abort()
	s.advanceLocked()
	return out
}
