package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/exporter/backend/sim"
	"github.com/gpuscale/gpuscale/pkg/gpu"
)

// FuzzSimPut sends arbitrary bodies to arbitrary GPU ids through the real
// handler, on one simulated node whose state carries over between inputs:
// no panic, no 5xx, a JSON error on every refusal, and whatever was
// accepted leaves every GPU within its physical range.
func FuzzSimPut(f *testing.F) {
	seeds := []struct{ id, body string }{
		{"0", `{"utilization": 85, "memoryUsedMiB": 40000}`},
		{"1", `{"xid": 79}`},
		{"0", `{"xid": 256}`},
		{"0", `{"fail": true}`},
		{"0", `{"fail": false, "utilization": 0}`},
		{"0", `{"memoryUsedMiB": 81040}`},
		{"0", `{"utilization":1}{"utilization":2}`},
		{"0", `{"utilization":1} garbage`},
		{"0", `null`},
		{"0", `{"utilization":1e400}`},
		{"0", `{"util":1}`},
		{"GPU-nope", `{}`},
		{"../../metrics", `{}`},
		{"%00", `{"utilization":-0}`},
	}
	for _, s := range seeds {
		f.Add(s.id, []byte(s.body))
	}
	n := newSimNode(f, sim.Options{GPUs: 2, MIGProfiles: []string{"3g.40gb", "2g.20gb", "1g.10gb"}, Identity: "fuzz"})
	n.collect(f)
	// MIG UUIDs are ids too; offer them to the fuzzer.
	rs, err := n.backend.Collect(context.Background())
	if err != nil {
		f.Fatal(err)
	}
	for _, r := range rs {
		f.Add(r.Device.ID(), []byte(`{"memoryUsedMiB": 9830}`))
	}

	f.Fuzz(func(t *testing.T, id string, body []byte) {
		req := httptest.NewRequest(http.MethodPut, "/api/v1/sim/gpus/x", bytes.NewReader(body))
		req.URL.Path = "/api/v1/sim/gpus/" + id
		rec := httptest.NewRecorder()
		n.h.ServeHTTP(rec, req)
		switch {
		case rec.Code >= 500:
			t.Fatalf("PUT %q %q: status %d: %s", id, body, rec.Code, rec.Body)
		case rec.Code == http.StatusNoContent:
		case rec.Code == http.StatusBadRequest || rec.Code == http.StatusRequestEntityTooLarge ||
			rec.Code == http.StatusNotFound && bytes.HasPrefix(rec.Body.Bytes(), []byte("{")):
			var e struct{ Error string }
			if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error == "" {
				t.Fatalf("PUT %q %q: %d without a JSON error: %q", id, body, rec.Code, rec.Body)
			}
		}
		rs, err := n.backend.Collect(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		checkInRange(t, rs)
	})
}

// checkInRange fails unless every reading is physically possible.
func checkInRange(t *testing.T, rs []gpu.Reading) {
	t.Helper()
	for _, r := range rs {
		id := r.Device.ID()
		for f := gpu.Field(0); f < gpu.NumFields; f++ {
			if v, ok := r.Get(f); ok && (math.IsNaN(v) || math.IsInf(v, 0) || v < 0) {
				t.Fatalf("%s: %v = %v", id, f, v)
			}
		}
		if u, ok := r.Get(gpu.FieldGPUUtil); ok && u > 100 {
			t.Fatalf("%s: utilization %v", id, u)
		}
		used, _ := r.Get(gpu.FieldFBUsed)
		free, _ := r.Get(gpu.FieldFBFree)
		total, _ := r.Get(gpu.FieldFBTotal)
		reserved, _ := r.Get(gpu.FieldFBReserved)
		if r.Healthy() && used+free+reserved != total {
			t.Fatalf("%s: used %v + free %v + reserved %v != total %v", id, used, free, reserved, total)
		}
		if len(r.XIDCounts) > gpu.MaxXIDCodes {
			t.Fatalf("%s: %d XID codes", id, len(r.XIDCounts))
		}
		for code := range r.XIDCounts {
			if !gpu.ValidXID(code) {
				t.Fatalf("%s: XID %d counted", id, code)
			}
		}
		if last, ok := r.Get(gpu.FieldLastXID); ok && last != 0 && !gpu.ValidXID(uint64(last)) {
			t.Fatalf("%s: last XID %v", id, last)
		}
	}
}
