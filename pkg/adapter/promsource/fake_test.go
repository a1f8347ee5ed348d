package promsource

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// fakeProm implements the instant-query endpoint of the Prometheus HTTP
// API: it records each request and answers with what reply returns.
type fakeProm struct {
	*httptest.Server
	mu       sync.Mutex
	requests []request
	reply    func(query string) (status int, body string)
	// names answers the label values API for __name__ (nil: 404, as a
	// server without the API).
	names    func(match, start, end string) (status int, body string)
	nameAsks int
}

type request struct{ query, lookback, timeout string }

// series is one result element: labels and a value ("NaN" allowed).
type series struct {
	labels map[string]string
	value  string
}

func vector(at time.Time, ss ...series) string {
	type elem struct {
		Metric map[string]string `json:"metric"`
		Value  [2]any            `json:"value"`
	}
	res := make([]elem, len(ss))
	for i, s := range ss {
		res[i] = elem{Metric: s.labels, Value: [2]any{float64(at.Unix()), s.value}}
	}
	b, _ := json.Marshal(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": res}})
	return string(b)
}

func newFakeProm(t *testing.T) *fakeProm {
	f := &fakeProm{}
	f.reply = func(string) (int, string) { return 200, vector(t0) }
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/label/__name__/values" {
			if err := r.ParseForm(); err != nil {
				t.Errorf("form: %v", err)
			}
			f.mu.Lock()
			f.nameAsks++
			names := f.names
			f.mu.Unlock()
			if names == nil {
				http.NotFound(w, r)
				return
			}
			status, body := names(r.Form.Get("match[]"), r.Form.Get("start"), r.Form.Get("end"))
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			fmt.Fprint(w, body)
			return
		}
		if r.URL.Path != "/api/v1/query" {
			http.NotFound(w, r)
			return
		}
		if err := r.ParseForm(); err != nil {
			t.Errorf("form: %v", err)
		}
		q := r.Form.Get("query")
		f.mu.Lock()
		f.requests = append(f.requests, request{query: q, lookback: r.Form.Get("lookback_delta"), timeout: r.Form.Get("timeout")})
		reply := f.reply
		f.mu.Unlock()
		status, body := reply(q)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeProm) setReply(fn func(string) (int, string)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply = fn
}

func (f *fakeProm) take() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.requests
	f.requests = nil
	return out
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newSource(t *testing.T, f *fakeProm) *Source {
	t.Helper()
	s, err := New(Config{URL: f.URL, Timeout: time.Second, MaxStaleness: 15 * time.Second, TTFTWindow: time.Minute,
		Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func pod(ns, name string, ready bool) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "llm"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}}}
}

func podLabels(name string) map[string]string {
	return map[string]string{"namespace": "ml", "pod": name}
}
