package httpapi

import (
	"bytes"
	"compress/gzip"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuscale/gpuscale/pkg/exporter"
)

// variant is one form a /metrics response takes.
type variant struct{ openMetrics, gzip bool }

// rendering is one variant's response for one snapshot: rendered once,
// by the first request that asks for it, while the others asking at the
// same time wait for it instead of rendering it again.
type rendering struct {
	done        chan struct{}
	body        []byte
	contentType string
}

// renders coalesces the /metrics responses of a snapshot: every scrape of
// the same snapshot and variant is answered from one render. The
// exporter's own families (Go runtime, process, self) are gathered with
// that render, so they are as fresh as the snapshot, one collection
// interval at most.
type renders struct {
	gatherer prometheus.Gatherer
	count    prometheus.Counter

	mu   sync.Mutex
	snap *exporter.Snapshot
	by   map[variant]*rendering
}

func newRenders(g prometheus.Gatherer, count prometheus.Counter) *renders {
	return &renders{gatherer: g, count: count, by: map[variant]*rendering{}}
}

// get returns the response of v for s, rendering it if no other request
// has. Before the first snapshot (s nil) nothing is kept once rendered:
// the next request renders afresh.
func (rs *renders) get(s *exporter.Snapshot, v variant) *rendering {
	rs.mu.Lock()
	if s != rs.snap {
		rs.snap, rs.by = s, map[variant]*rendering{}
	}
	r, found := rs.by[v]
	if !found {
		r = &rendering{done: make(chan struct{})}
		rs.by[v] = r
	}
	rs.mu.Unlock()
	if found {
		<-r.done
		return r
	}
	defer close(r.done)
	r.body, r.contentType = rs.render(s, v)
	if !v.gzip {
		rs.count.Inc() // gzip compresses the plain render: not one more
	}
	if s == nil {
		rs.mu.Lock()
		if rs.snap == nil && rs.by[v] == r {
			delete(rs.by, v)
		}
		rs.mu.Unlock()
	}
	return r
}

// render encodes the gatherer's families, then the snapshot's GPU series
// as the collector encoded them in the background, in the text format or
// OpenMetrics, gzipped or not. A client that accepts neither text format
// gets text, which the content type says.
func (rs *renders) render(s *exporter.Snapshot, v variant) ([]byte, string) {
	if v.gzip {
		plain := rs.get(s, variant{openMetrics: v.openMetrics})
		var buf bytes.Buffer
		gz := gzipPool.Get().(*gzip.Writer)
		gz.Reset(&buf)
		_, _ = gz.Write(plain.body) // a bytes.Buffer does not fail
		_ = gz.Close()
		gzipPool.Put(gz)
		return buf.Bytes(), plain.contentType
	}
	format := expfmt.NewFormat(expfmt.TypeTextPlain)
	if v.openMetrics {
		format = expfmt.NewFormat(expfmt.TypeOpenMetrics)
	}
	mfs, err := rs.gatherer.Gather()
	if err != nil {
		// As promhttp.ContinueOnError: serve what was gathered.
		slog.Debug("gathering the exporter's own metrics", "err", err)
	}
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, format)
	for _, mf := range mfs {
		if s != nil && s.HasFamily(mf.GetName()) {
			continue // a gatherer holding the collector: served below
		}
		if err := enc.Encode(mf); err != nil {
			slog.Debug("encoding the exporter's own metrics", "family", mf.GetName(), "err", err)
		}
	}
	if s != nil {
		buf.Write(s.Exposition(v.openMetrics))
	}
	if c, ok := enc.(expfmt.Closer); ok {
		_ = c.Close()
	}
	return buf.Bytes(), string(format)
}

// gzipPool holds BestSpeed writers: a GPU exposition is repetitive label
// text that compresses 25-fold at the fastest level.
var gzipPool = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return w
}}

// newMetricsHandler serves the snapshot's coalesced response: the
// registry's families and the GPU series, in the text format or, when
// asked, OpenMetrics, gzipped when the client accepts it, as promhttp
// does. Concurrent scrapes of one snapshot share one render.
func newMetricsHandler(rs *renders, src SnapshotSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		// Only the two text formats are offered: a client that accepts
		// neither gets text, NegotiateAccept's fallback.
		format := expfmt.NegotiateAccept(r.Header, expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtOpenMetrics_0_0_1, expfmt.FmtText)
		v := variant{openMetrics: format.FormatType() == expfmt.TypeOpenMetrics, gzip: acceptsGzip(r)}
		resp := rs.get(src.Snapshot(), v)
		h := w.Header()
		h.Set("Content-Type", resp.contentType)
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
		if v.gzip {
			h.Set("Content-Encoding", "gzip")
			h.Add("Vary", "Accept-Encoding")
		}
		_, _ = w.Write(resp.body) // the client went away: nothing to do
	}
}

// acceptsGzip reports whether the request accepts a gzip body.
func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		enc, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
