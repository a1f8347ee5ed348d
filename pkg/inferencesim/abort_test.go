package inferencesim

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestAbort: Abort drops every request, queued or streaming, tells each
// follower whether its stream had started, frees the KV cache, and leaves
// an engine that serves what comes next.
func TestAbort(t *testing.T) {
	tests := []struct {
		name     string
		requests int
		after    time.Duration // simulated time between the arrivals and the abort
		// streams and others say whether the abort must cut streams and
		// drop requests that had not streamed yet.
		streams, others bool
	}{
		{"nothing held", 0, time.Second, false, false},
		{"all queued or prefilling", 40, 0, false, true},
		{"some streaming, some queued", 40, 3 * time.Second, true, true},
		{"all finished", 3, 10 * time.Minute, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := NewEngine(DefaultProfile(), func() time.Time { return t0 })
			if err != nil {
				t.Fatal(err)
			}
			var firsts, abortedStreams, abortedOthers int
			follow := Follow{
				FirstToken: func(time.Duration) { firsts++ },
				Aborted: func(streamed bool) {
					if streamed {
						abortedStreams++
					} else {
						abortedOthers++
					}
				},
			}
			for range tt.requests {
				if err := e.SubmitFollow(t0, Request{ContextTokens: 2000, GeneratedTokens: 400}, follow); err != nil {
					t.Fatal(err)
				}
			}
			e.Advance(t0.Add(tt.after))
			before := e.Peek()
			held := before.Waiting + before.Running
			completed := int(before.Completed)

			got := e.Abort()
			checkInvariants(t, e)
			if got.Requests != held || got.Requests != abortedStreams+abortedOthers {
				t.Errorf("Abort dropped %d requests, engine held %d, followers heard %d", got.Requests, held, abortedStreams+abortedOthers)
			}
			if streaming := firsts - completed; got.Streams != streaming || got.Streams != abortedStreams {
				t.Errorf("Abort cut %d streams; %d had a first token and had not finished; followers heard %d", got.Streams, streaming, abortedStreams)
			}
			if (got.Streams > 0) != tt.streams || (got.Requests > got.Streams) != tt.others {
				t.Errorf("Abort dropped %d requests, %d of them streaming; the case wants streams %v, others %v", got.Requests, got.Streams, tt.streams, tt.others)
			}
			st := e.Peek()
			if st.Waiting != 0 || st.Running != 0 || st.KVCacheUsedTokens != 0 {
				t.Errorf("after Abort: %d waiting, %d running, %d KV tokens; want an empty engine", st.Waiting, st.Running, st.KVCacheUsedTokens)
			}
			if st.Aborted != uint64(got.Requests) || st.Completed != before.Completed {
				t.Errorf("Stats: %d aborted, %d completed; want %d and %d", st.Aborted, st.Completed, got.Requests, before.Completed)
			}

			// The engine serves on: a new request finishes, and nothing
			// aborted comes back to life.
			var done int
			e.SetHooks(Hooks{Finished: func(Completion) { done++ }})
			if err := e.SubmitAt(e.Now(), Request{ContextTokens: 100, GeneratedTokens: 10}); err != nil {
				t.Fatal(err)
			}
			e.Advance(e.Now().Add(time.Minute))
			if done != 1 {
				t.Errorf("after Abort, %d requests finished; want only the new one", done)
			}
		})
	}
}

// TestServerAbortCounted: a simulated vLLM counts aborted requests under
// request_success_total{finished_reason="abort"}, as vLLM does.
func TestServerAbortCounted(t *testing.T) {
	now := t0
	srv, err := NewServer(Options{Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	aborted := 0
	for range 5 {
		if err := srv.SubmitFollow(Request{ContextTokens: 3000, GeneratedTokens: 500}, Follow{Aborted: func(bool) { aborted++ }}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(500 * time.Millisecond)
	if got := srv.Abort(); got.Requests != 5 || aborted != 5 {
		t.Fatalf("Abort dropped %d, followers heard %d; want 5", got.Requests, aborted)
	}
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	want := `vllm:request_success_total{engine="0",finished_reason="abort",model_name="` + DefaultModel + `"} 5`
	if !strings.Contains(rec.Body.String(), want) {
		t.Errorf("/metrics lacks %q", want)
	}
	if srv.InFlight() != 0 {
		t.Errorf("%d requests in flight after Abort", srv.InFlight())
	}
}
