package devenv

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestScalar: one sample is its value, none is no value, and anything else
// a server might answer is an error, never a number.
func TestScalar(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       float64
		ok, err    bool
	}{
		{"one sample", `{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1.5,"42"]}]}}`, 42, true, false},
		{"none", `{"status":"success","data":{"resultType":"vector","result":[]}}`, 0, false, false},
		{"two", `{"status":"success","data":{"result":[{"value":[1,"1"]},{"value":[1,"2"]}]}}`, 0, false, true},
		{"an error", `{"status":"error","errorType":"bad_data","error":"parse error"}`, 0, false, true},
		{"not a number", `{"status":"success","data":{"result":[{"value":[1,"many"]}]}}`, 0, false, true},
		{"not JSON", `<html>`, 0, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/api/v1/query" || r.URL.Query().Get("query") != "up" {
					http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
					return
				}
				_, _ = io.WriteString(w, tc.body)
			}))
			defer srv.Close()
			v, ok, err := (&Prometheus{URL: srv.URL}).Scalar(context.Background(), "up")
			if (err != nil) != tc.err || ok != tc.ok || v != tc.want {
				t.Errorf("Scalar = %v, %v, %v; want %v, %v, error %v", v, ok, err, tc.want, tc.ok, tc.err)
			}
		})
	}
}
