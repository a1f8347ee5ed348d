package inferencesim

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func getLoad(t *testing.T, baseURL string) LoadView {
	t.Helper()
	code, body := call(t, http.MethodGet, baseURL+"/api/v1/load", "")
	var v LoadView
	if err := json.Unmarshal([]byte(body), &v); code != http.StatusOK || err != nil || v.Stats == nil {
		t.Fatalf("GET /api/v1/load: %d %s (%v)", code, body, err)
	}
	return v
}

func TestAPIRateChangeTakesEffect(t *testing.T) {
	_, clock, hs := newTestServer(t, Options{Seed: 3})
	if v := getLoad(t, hs.URL); v.Rate != 0 || v.ContextTokens != 1000 || v.GeneratedTokens != 130 {
		t.Fatalf("initial load %+v, want rate 0 and the default request", v)
	}
	if code, body := call(t, http.MethodPut, hs.URL+"/api/v1/load", `{"rate": 12.5}`); code != http.StatusOK ||
		!strings.Contains(body, `"rate":12.5`) {
		t.Fatalf("PUT rate: %d %s", code, body)
	}
	clock.Step(time.Minute)
	v := getLoad(t, hs.URL)
	// 750 expected arrivals; Poisson spread is about 27.
	if v.Rate != 12.5 || v.Stats.Submitted < 650 || v.Stats.Submitted > 850 {
		t.Errorf("after a minute at 12.5 req/s: %+v %+v, want about 750 submitted", v, *v.Stats)
	}
	if v.Stats.BusyFraction < 0.99 || v.Stats.BusySeconds < 59 {
		t.Errorf("busy fraction %v over %vs busy, want about 1 at 12.5 req/s", v.Stats.BusyFraction, v.Stats.BusySeconds)
	}

	if code, body := call(t, http.MethodPut, hs.URL+"/api/v1/load", `{"rate": 0, "contextTokens": 4000}`); code != http.StatusOK {
		t.Fatalf("PUT rate 0: %d %s", code, body)
	}
	clock.Step(time.Minute)
	after := getLoad(t, hs.URL)
	if after.Stats.Submitted != v.Stats.Submitted || after.ContextTokens != 4000 || after.GeneratedTokens != 130 {
		t.Errorf("after stopping: %+v %+v, want no new arrivals and 4000/130-token requests", after, *after.Stats)
	}
	// The engine drained during the idle minute.
	if after.Stats.Waiting != 0 || after.Stats.Running != 0 || after.Stats.BusyFraction > 0.5 {
		t.Errorf("after an idle minute: %+v, want an empty, mostly idle engine", *after.Stats)
	}
}

func TestAPISubmitRequests(t *testing.T) {
	_, clock, hs := newTestServer(t, Options{Dialect: TGI})
	code, body := call(t, http.MethodPost, hs.URL+"/api/v1/requests",
		`[{"contextTokens": 2000, "generatedTokens": 10}, {"contextTokens": 500, "generatedTokens": 5}]`)
	if code != http.StatusAccepted || !strings.Contains(body, `"accepted":2`) {
		t.Fatalf("POST requests: %d %s", code, body)
	}
	clock.Step(10 * time.Second)
	v := getLoad(t, hs.URL)
	if v.Stats.Submitted != 2 || v.Stats.Completed != 2 || v.Stats.PromptTokens != 2500 || v.Stats.GenerationTokens != 15 {
		t.Errorf("stats %+v, want both requests served: 2500 prompt and 15 generated tokens", *v.Stats)
	}
}

func TestAPIRejectsBadInput(t *testing.T) {
	s, _, hs := newTestServer(t, Options{Rate: 3})
	for _, tc := range []struct {
		method, path, body string
	}{
		{http.MethodPut, "/api/v1/load", `{"rate": -1}`},
		{http.MethodPut, "/api/v1/load", `{"rate": 1e9}`},
		{http.MethodPut, "/api/v1/load", `{"rate": "fast"}`},
		{http.MethodPut, "/api/v1/load", `{"rate": 5`},
		{http.MethodPut, "/api/v1/load", `{"rate": 5} {"rate": 6}`},
		{http.MethodPut, "/api/v1/load", `{"rat": 5}`},
		{http.MethodPut, "/api/v1/load", `{}`},
		{http.MethodPut, "/api/v1/load", ``},
		{http.MethodPut, "/api/v1/load", `{"rate": 5, "contextTokens": 0}`},
		{http.MethodPut, "/api/v1/load", `{"rate": 5, "generatedTokens": -3}`},
		{http.MethodPut, "/api/v1/load", `{"rate": 5, "contextTokens": 1000000}`},
		{http.MethodPost, "/api/v1/requests", `[]`},
		{http.MethodPost, "/api/v1/requests", `{"contextTokens": 10, "generatedTokens": 1}`},
		{http.MethodPost, "/api/v1/requests", `[{"contextTokens": 10, "generatedTokens": 1}, {"contextTokens": 10}]`},
	} {
		code, body := call(t, tc.method, hs.URL+tc.path, tc.body)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("%s %s %s: %d %s, want 400 with an error message", tc.method, tc.path, tc.body, code, body)
		}
	}
	// Nothing of the rejected changes was applied.
	if v := getLoad(t, hs.URL); v.Rate != 3 || v.ContextTokens != 1000 || v.Stats.Submitted != 0 {
		t.Errorf("after rejected calls: %+v %+v, want rate 3, default sizes, nothing submitted", v, *v.Stats)
	}
	if s.Rate() != 3 {
		t.Errorf("rate %v, want 3", s.Rate())
	}
	if code, _ := call(t, http.MethodDelete, hs.URL+"/api/v1/load", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /api/v1/load: %d, want 405", code)
	}
	if code, body := call(t, http.MethodGet, hs.URL+"/healthz", ""); code != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz: %d %q", code, body)
	}
}

func TestRunAdvancesInTheBackground(t *testing.T) {
	s, clock, _ := newTestServer(t, Options{Rate: 20, Interval: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	clock.Step(10 * time.Second)
	// Run's ticker is real time: wait for a tick to drive the fake clock's
	// ten seconds into the engine.
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.engine.Peek().Submitted > 0, nil
	}); err != nil {
		t.Fatalf("Run did not advance the simulation: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run returned %v", err)
	}
}
