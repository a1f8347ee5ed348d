package scrape

import (
	"bytes"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// hostileLines are endless expositions, each as costly to parse as a line
// format allows, of a family the adapter reads: however large the body cap,
// the target fills it.
var hostileLines = []struct {
	name string
	line func(i int) string
	gzip bool
}{
	{"label-values", func(i int) string {
		return fmt.Sprintf(`vllm:num_requests_waiting{model_name="%s",i="%d"} 1`+"\n", strings.Repeat("m", 2000), i)
	}, false},
	{"many-labels", func(i int) string {
		var b strings.Builder
		b.WriteString("vllm:num_requests_waiting{")
		for l := range 64 {
			fmt.Fprintf(&b, `l%d="%d",`, l, i%1000)
		}
		b.WriteString("} 1\n")
		return b.String()
	}, false},
	{"series", func(i int) string { return fmt.Sprintf("vllm:num_requests_waiting{i=\"%d\"} 1\n", i) }, false},
	{"gzip-many-labels", nil, true},
}

// BenchmarkHostileMemory runs cycles over hostileTargets targets that each
// serve hostile lines until the scraper stops reading, with the default
// Config, and reports the peak of the heap (live objects and garbage not
// yet collected) during the cycle as peak-heap-MiB. It measures the
// scraper's memory under attack: the bound is the in-flight budget plus
// per-worker buffers, whatever the targets send.
func BenchmarkHostileMemory(b *testing.B) {
	const hostileTargets = 16
	for i, h := range hostileLines {
		b.Run(h.name, func(b *testing.B) {
			line := h.line
			if line == nil {
				line = hostileLines[1].line
			}
			// 16 MiB of lines, more than any cap here lets through.
			var body bytes.Buffer
			for n := 0; body.Len() < 16<<20; n++ {
				body.WriteString(line(n))
			}
			srv := serveBody(b, body.Bytes(), ctText, h.gzip)
			ts := make([]Target, hostileTargets)
			for j := range ts {
				key := fmt.Sprintf("hostile-%d-%d", i, j)
				ts[j] = Target{Key: key, URL: srv.URL + "/" + key, Families: testFamilies}
			}
			s := New(Config{Timeout: time.Minute})
			var failed atomic.Int64
			sink := func(r Result) {
				if r.Err != nil {
					failed.Add(1)
				}
			}
			peak := samplePeakHeap(b, func() {
				for b.Loop() {
					s.Cycle(b.Context(), ts, sink)
				}
			})
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(failed.Load())/float64(b.N*len(ts)), "failed/scrape")
		})
	}
}

// samplePeakHeap runs f and returns the largest heap size seen meanwhile,
// sampled every 100µs, less the heap in use before f started.
func samplePeakHeap(b *testing.B, f func()) uint64 {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(sample)
	base := sample[0].Value.Uint64()
	var peak atomic.Uint64
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(100 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			metrics.Read(s)
			if v := s[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
		}
	}()
	f()
	close(done)
	<-stopped
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}
