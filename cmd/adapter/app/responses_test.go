package app

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
)

// TestResponseCompression serializes an answer larger than the generic API
// server's gzip threshold through its own response writer, for a client
// that accepts gzip, with the option off and on.
func TestResponseCompression(t *testing.T) {
	gate := defaultFeatureGate()
	t.Cleanup(func() {
		if err := setResponseCompression(gate, true, slog.New(slog.DiscardHandler)); err != nil {
			t.Error(err)
		}
	})
	big := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap", "data": map[string]any{"k": strings.Repeat("x", 512<<10)},
	}}
	for _, tc := range []struct {
		on       bool
		encoding string
	}{
		{on: false, encoding: ""},
		{on: true, encoding: "gzip"},
	} {
		if err := setResponseCompression(gate, tc.on, slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest(http.MethodGet, "/apis/custom.metrics.k8s.io/v1beta2/namespaces/a/pods/*/m", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		rec := httptest.NewRecorder()
		responsewriters.SerializeObject("application/json", unstructured.UnstructuredJSONScheme, rec, req, http.StatusOK, big)
		if got := rec.Header().Get("Content-Encoding"); got != tc.encoding {
			t.Errorf("compression %v: Content-Encoding %q, want %q", tc.on, got, tc.encoding)
		}
		body, err := io.ReadAll(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		if plain := strings.Contains(string(body), strings.Repeat("x", 1024)); plain == tc.on {
			t.Errorf("compression %v: body plain %v (%d bytes)", tc.on, plain, len(body))
		}
	}
}
