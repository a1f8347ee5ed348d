package federation

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// TestSizeLimit: a backend's answer past the limit fails to read, with or
// without a Content-Length, and an answer of exactly the limit reads whole.
func TestSizeLimit(t *testing.T) {
	body := strings.Repeat("x", 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("length") == "yes" {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		io.WriteString(w, body)
		w.(http.Flusher).Flush() // no Content-Length: chunked
	}))
	defer srv.Close()
	cases := []struct {
		name    string
		limit   int64
		length  string
		wantErr bool
	}{
		{"chunked over the limit", 999, "no", true},
		{"declared over the limit", 999, "yes", true},
		{"chunked at the limit", 1000, "no", false},
		{"declared at the limit", 1000, "yes", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			client := &http.Client{Transport: &sizeLimitRoundTripper{next: http.DefaultTransport, limit: c.limit}}
			resp, err := client.Get(srv.URL + "?length=" + c.length)
			var got []byte
			if err == nil {
				got, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			if c.wantErr {
				if !errors.Is(err, errResponseTooLarge) {
					t.Fatalf("err = %v, want %v", err, errResponseTooLarge)
				}
				return
			}
			if err != nil || string(got) != body {
				t.Fatalf("read %d bytes, err %v; want the whole %d-byte body", len(got), err, len(body))
			}
		})
	}
}
