package app

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/endpoints/handlers/responsewriters"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
	cmapiserver "sigs.k8s.io/custom-metrics-apiserver/pkg/apiserver"
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

// TestShareListItems checks that the adapter's API server scheme, once
// shareListItems has run (from several goroutines, as tests that start
// adapters may), converts a list to v1beta2 sharing its items.
func TestShareListItems(t *testing.T) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			if err := shareListItems(slog.New(slog.DiscardHandler)); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	in := &custom_metrics.MetricValueList{Items: []custom_metrics.MetricValue{{
		DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "llm-0", APIVersion: "v1"},
		Metric:          custom_metrics.MetricIdentifier{Name: "inference_queue_depth"},
		Value:           resource.MustParse("3"),
	}}}
	out, err := runtime.UnsafeObjectConvertor(cmapiserver.Scheme).ConvertToVersion(in, cmv1beta2.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	l, ok := out.(*cmv1beta2.MetricValueList)
	if !ok || len(l.Items) != 1 {
		t.Fatalf("converted to %#v", out)
	}
	if l.Items[0].DescribedObject.Name != "llm-0" || l.Items[0].Value.String() != "3" {
		t.Errorf("converted item %+v", l.Items[0])
	}
	if unsafe.Pointer(&l.Items[0]) != unsafe.Pointer(&in.Items[0]) {
		t.Error("the adapter's scheme copies list items")
	}
}
