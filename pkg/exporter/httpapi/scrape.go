package httpapi

import (
	"compress/gzip"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// gzipPool holds BestSpeed writers: a GPU exposition is repetitive label
// text that compresses 25-fold at the fastest level, and compression is
// most of a scrape's CPU.
var gzipPool = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(nil, gzip.BestSpeed) // a valid level: no error
	return w
}}

// newMetricsHandler serves g's families, then the snapshot's GPU series as
// the collector encoded them in the background: a scrape copies them
// rather than converting, sorting and escaping each series again. It
// answers the Prometheus text format or, when asked, OpenMetrics, gzipped
// when the client accepts it, as promhttp does. A client asking only for
// the protobuf format gets text, which the content type says.
func newMetricsHandler(g prometheus.Gatherer, src SnapshotSource) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		mfs, err := g.Gather()
		if err != nil {
			// As promhttp.ContinueOnError: serve what was gathered.
			slog.Debug("gathering the exporter's own metrics", "err", err)
		}
		// Only the two text formats are offered: a client that accepts
		// neither gets text, NegotiateAccept's fallback.
		format := expfmt.NegotiateAccept(r.Header, expfmt.FmtOpenMetrics_1_0_0, expfmt.FmtOpenMetrics_0_0_1, expfmt.FmtText)
		openMetrics := format.FormatType() == expfmt.TypeOpenMetrics
		w.Header().Set("Content-Type", string(format))
		var out io.Writer = w
		if acceptsGzip(r) {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Add("Vary", "Accept-Encoding")
			gz := gzipPool.Get().(*gzip.Writer)
			gz.Reset(w)
			defer func() {
				_ = gz.Close()
				gzipPool.Put(gz)
			}()
			out = gz
		}
		enc := expfmt.NewEncoder(out, format)
		s := src.Snapshot()
		for _, mf := range mfs {
			if s != nil && s.HasFamily(mf.GetName()) {
				continue // a registry holding the collector: served below
			}
			if err := enc.Encode(mf); err != nil {
				return // the client went away
			}
		}
		if s != nil {
			if _, err := out.Write(s.Exposition(openMetrics)); err != nil {
				return
			}
		}
		if c, ok := enc.(expfmt.Closer); ok {
			_ = c.Close()
		}
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
