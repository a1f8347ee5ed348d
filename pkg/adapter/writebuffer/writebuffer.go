// Package writebuffer coalesces a handler's small response writes into
// larger ones before they reach the generic API server's filter chain.
//
// The Kubernetes API server encodes a list one item at a time, straight to
// the response writer (streaming collection encoding, always on since 1.34).
// Every write then passes through each filter's wrapper: the timeout
// filter's mutex, the write-latency tracker's clock reads, the tracing and
// metrics wrappers. A 10,000-pod metrics list is 10,000 writes of about 90
// bytes, and those wrappers cost more CPU than encoding the items
// (docs/performance.md, "Writes coalesced under the filters, and no
// gzip"). Placed inside the chain, this package hands the filters 32 KiB
// at a time.
package writebuffer

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"sync"

	"github.com/felixge/httpsnoop"
)

// Size is the buffer: larger writes go through at once. A request holds
// one while its handler runs, so the API server's bound on requests in
// flight bounds them too (at its default of 400, 12.5 MiB).
const Size = 32 << 10

var pool = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, Size) }}

// Handler calls h with a writer that buffers its writes up to Size bytes,
// and flushes what is left when h returns. The status is sent at the first
// write, as net/http would, so that a later WriteHeader cannot change it.
// Flush, Hijack and ReadFrom flush the buffer first: streaming responses
// keep their timing.
func Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		buf := pool.Get().(*bufio.Writer)
		buf.Reset(w)
		defer func() {
			buf.Reset(nil)
			pool.Put(buf)
		}()
		var wroteHeader bool
		// The status goes out at the first byte, as net/http would send it.
		sendStatus := func() {
			if !wroteHeader {
				wroteHeader = true
				w.WriteHeader(http.StatusOK)
			}
		}
		wrapped := httpsnoop.Wrap(w, httpsnoop.Hooks{
			WriteHeader: func(next httpsnoop.WriteHeaderFunc) httpsnoop.WriteHeaderFunc {
				return func(code int) {
					if code >= 200 {
						if wroteHeader {
							return
						}
						wroteHeader = true
					}
					next(code)
				}
			},
			Write: func(httpsnoop.WriteFunc) httpsnoop.WriteFunc {
				return func(p []byte) (int, error) {
					sendStatus()
					return buf.Write(p)
				}
			},
			WriteString: func(httpsnoop.WriteStringFunc) httpsnoop.WriteStringFunc {
				return func(s string) (int, error) {
					sendStatus()
					return buf.WriteString(s)
				}
			},
			Flush: func(next httpsnoop.FlushFunc) httpsnoop.FlushFunc {
				return func() {
					if buf.Flush() == nil {
						next()
					}
				}
			},
			FlushError: func(next httpsnoop.FlushErrorFunc) httpsnoop.FlushErrorFunc {
				return func() error {
					if err := buf.Flush(); err != nil {
						return err
					}
					return next()
				}
			},
			ReadFrom: func(next httpsnoop.ReadFromFunc) httpsnoop.ReadFromFunc {
				return func(src io.Reader) (int64, error) {
					sendStatus()
					if err := buf.Flush(); err != nil {
						return 0, err
					}
					return next(src)
				}
			},
			Hijack: func(next httpsnoop.HijackFunc) httpsnoop.HijackFunc {
				return func() (net.Conn, *bufio.ReadWriter, error) {
					if err := buf.Flush(); err != nil {
						return nil, nil, err
					}
					return next()
				}
			},
		})
		h.ServeHTTP(wrapped, r)
		// An error here is the client's going away: nothing is left to tell.
		_ = buf.Flush()
	})
}
