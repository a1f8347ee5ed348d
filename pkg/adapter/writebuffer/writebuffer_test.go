package writebuffer

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// countingWriter records how many writes reach it, as a filter would see
// them.
type countingWriter struct {
	*httptest.ResponseRecorder
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.ResponseRecorder.Write(p)
}

func TestHandler(t *testing.T) {
	item := bytes.Repeat([]byte("x"), 90)
	for _, tc := range []struct {
		name      string
		handler   http.HandlerFunc
		status    int
		body      string
		maxWrites int
	}{{
		name: "10,000 small writes arrive whole, in few",
		handler: func(w http.ResponseWriter, _ *http.Request) {
			for range 10000 {
				if _, err := w.Write(item); err != nil {
					t.Error(err)
				}
			}
		},
		status: http.StatusOK, body: strings.Repeat(string(item), 10000), maxWrites: 10000*90/Size + 1,
	}, {
		name: "a status set before writing is kept",
		handler: func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, "gone")
		},
		status: http.StatusNotFound, body: "gone", maxWrites: 1,
	}, {
		name: "the first write sends 200, as net/http does; a later status is ignored",
		handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte("partial"))
			w.WriteHeader(http.StatusInternalServerError)
		},
		status: http.StatusOK, body: "partial", maxWrites: 1,
	}, {
		name: "a write larger than the buffer goes through at once",
		handler: func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write(bytes.Repeat([]byte("y"), 3*Size))
		},
		status: http.StatusOK, body: strings.Repeat("y", 3*Size), maxWrites: 1,
	}, {
		name:    "no body, no write",
		handler: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) },
		status:  http.StatusNoContent, body: "", maxWrites: 0,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &countingWriter{ResponseRecorder: httptest.NewRecorder()}
			Handler(tc.handler).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/", nil))
			if rec.Code != tc.status {
				t.Errorf("status %d, want %d", rec.Code, tc.status)
			}
			if got := rec.Body.String(); got != tc.body {
				t.Errorf("body of %d bytes, want %d", len(got), len(tc.body))
			}
			if rec.writes > tc.maxWrites {
				t.Errorf("%d writes reached the filters, want at most %d", rec.writes, tc.maxWrites)
			}
		})
	}
}

// TestHandlerFlushStreams checks, over a real HTTP server, that Flush sends
// what was buffered: a client reads the first part before the handler
// writes the second.
func TestHandlerFlushStreams(t *testing.T) {
	read := make(chan struct{})
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-read
		_, _ = io.WriteString(w, "second\n")
	})))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := bufio.NewReader(resp.Body)
	first, err := r.ReadString('\n')
	if err != nil || first != "first\n" {
		t.Fatalf("first line %q, %v", first, err)
	}
	close(read)
	second, err := r.ReadString('\n')
	if err != nil || second != "second\n" {
		t.Fatalf("second line %q, %v", second, err)
	}
}

// filterWriter stands for one of the API server's response-writer
// wrappers: a mutex and a clock read per write.
type filterWriter struct {
	http.ResponseWriter
	mu chanMutex
}

type chanMutex chan struct{}

func (f filterWriter) Write(p []byte) (int, error) {
	f.mu <- struct{}{}
	defer func() { <-f.mu }()
	return f.ResponseWriter.Write(p)
}

// BenchmarkListWrites writes a 10,000-item list of 90-byte items through
// four wrappers, as the API server's filters wrap a response, with and
// without the buffer inside them.
func BenchmarkListWrites(b *testing.B) {
	item := bytes.Repeat([]byte("x"), 90)
	list := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		for range 10000 {
			_, _ = w.Write(item)
		}
	})
	for _, bc := range []struct {
		name string
		h    http.Handler
	}{{"direct", list}, {"buffered", Handler(list)}} {
		b.Run(bc.name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, "/", nil)
			b.ReportAllocs()
			for b.Loop() {
				var w http.ResponseWriter = &discard{header: http.Header{}}
				for range 4 {
					w = filterWriter{ResponseWriter: w, mu: make(chanMutex, 1)}
				}
				bc.h.ServeHTTP(w, req)
			}
		})
	}
}

type discard struct{ header http.Header }

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}
