package autoscalebench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"errors"
	"image/png"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// reportRecording is a ten-minute slice with two policies whose numbers are
// worked out by hand, two generated ones that stress the plots (cold
// starts, unserved minutes, zero TTFTs) and one with nothing at all.
func reportRecording() Recording {
	const dur = 10 * time.Minute
	rec := Recording{
		Trace: "traces/azure-conv.csv", Start: time.Hour, Duration: dur,
		Speedup: 10, SLO: 2 * time.Second, StaticReplicas: 2,
		RateBucket: 10 * time.Second,
	}
	for i := range 60 {
		rec.RequestRate = append(rec.RequestRate, 0.1+0.05*float64(i%7))
	}

	// static-peak: 2 pods all along, 60 requests at 0.5 s.
	static := PolicyRecording{Policy: PolicyStatic, Describe: "static 2 replicas",
		Samples: []Sample{{At: 0, Desired: 2, Ready: 2, Pods: 2}}}
	// queue-depth: 1 pod for 60 s, 2 until 300 s, 1 after: 840 GPU-s.
	// Minute 0 unserved, minute 5 at 3 s, the rest at 1.5 s.
	queue := PolicyRecording{Policy: PolicyQueueDepth, Describe: "queue depth 4 per replica",
		Samples: []Sample{
			{At: 0, Desired: 1, Ready: 0, Pods: 1},
			{At: time.Minute, Desired: 2, Ready: 1, Pods: 2},
			{At: 5 * time.Minute, Desired: 1, Ready: 1, Pods: 1},
		}}
	for i := range 60 {
		at := float64(i * 10)
		static.Requests = append(static.Requests, served(at, 0.5))
		switch {
		case at < 60:
			queue.Requests = append(queue.Requests, unserved(at))
		case at >= 300 && at < 360:
			queue.Requests = append(queue.Requests, served(at, 3))
		default:
			queue.Requests = append(queue.Requests, served(at, 1.5))
		}
	}
	empty := PolicyRecording{Policy: "empty/odd name", Describe: "nothing | at all"}
	rec.Policies = []PolicyRecording{
		generated(PolicyGPUUtilization, "gpu util 70%", dur, 0),
		queue,
		generated(PolicyTTFT, "ttft p90 1.5s", dur, 1),
		static,
		empty,
	}
	return rec
}

// generated makes a policy that scales up and down every few minutes and
// whose TTFT swings over three decades, including zero and unserved.
func generated(name, describe string, dur time.Duration, seed int) PolicyRecording {
	p := PolicyRecording{Policy: name, Describe: describe}
	for at := time.Duration(0); at < dur; at += 15 * time.Second {
		d := 1 + int(at/(2*time.Minute)+time.Duration(seed))%3
		p.Samples = append(p.Samples, Sample{At: at, Desired: d, Ready: max(d-1, 0), Pods: d})
	}
	for i := range 300 {
		at := float64(i*2 + seed)
		switch {
		case at > 400 && at < 430:
			// A gap: the 10 s buckets from 410 s to 430 s stay empty.
		case i%37 == 0:
			p.Requests = append(p.Requests, unserved(at))
		case i%11 == 0:
			p.Requests = append(p.Requests, served(at, 0))
		default:
			p.Requests = append(p.Requests, served(at, 0.01*math.Pow(10, float64(i%4))))
		}
	}
	return p
}

func TestWriteReport(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	rec := reportRecording()
	if err := WriteReport(dir, rec); err != nil {
		t.Fatalf("WriteReport: %v", err)
	}
	for _, base := range []string{"gpu-utilization", "queue-depth", "ttft-p90", "static-peak", "empty_odd_name", "comparison"} {
		checkPNG(t, filepath.Join(dir, base+".png"))
		checkSVG(t, filepath.Join(dir, base+".svg"))
	}

	md := readFile(t, filepath.Join(dir, "report.md"))
	for _, want := range []string{
		"`traces/azure-conv.csv`",
		"start 1h0m0s, duration 10m0s",
		"10x real time",
		"TTFT p90 <= 2s",
		"Static replicas (peak need): 2",
		"| static-peak | static 2 replicas | 0.5 | 0.5 | 0.5 | 10/10 (100%) | 0.333 | 100% | 0 | 0 | 2 | 2 | 0 of 60 |",
		// Sorted: 48 at 1.5 s, 6 at 3 s, 6 unserved: ranks 30, 54, 60.
		"| queue-depth | queue depth 4 per replica | 1.5 | 3 | inf | 8/10 (80%) | 0.233 | 70% | 1 | 1 | 2 | 2 | 6 of 60 |",
		`| empty/odd name | nothing \| at all | n/a | n/a | n/a | 0/0 (n/a) | 0 | 0% | 0 | 0 | 0 | 0 | 0 of 0 |`,
		"| gpu-utilization | gpu util 70% |",
		"| ttft-p90 | ttft p90 1.5s |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q; it is:\n%s", want, md)
		}
	}

	raw := readFile(t, filepath.Join(dir, "report.json"))
	var doc ReportJSON
	if err := json.Unmarshal([]byte(raw), &doc); err != nil {
		t.Fatalf("report.json: %v", err)
	}
	if len(doc.Policies) != len(rec.Policies) {
		t.Fatalf("report.json has %d policies, want %d", len(doc.Policies), len(rec.Policies))
	}
	q := doc.Policies[1]
	if q.Policy != PolicyQueueDepth || !math.IsInf(float64(q.TTFTP99Seconds), 1) ||
		float64(q.TTFTP90Seconds) != 3 || float64(q.GPUSeconds) != 840 || q.MinutesMet != 8 {
		t.Errorf("queue-depth in report.json = %+v", q)
	}
	if e := doc.Policies[4]; !math.IsNaN(float64(e.TTFTP50Seconds)) || !math.IsNaN(float64(e.MinutesMetShare)) {
		t.Errorf("empty policy in report.json = %+v, want NaN quantiles and share", e)
	}
	if float64(doc.SLOSeconds) != 2 || doc.StaticReplicas != 2 || doc.Trace != rec.Trace {
		t.Errorf("report.json header = %+v", doc)
	}
	for _, want := range []string{`"ttftP99Seconds": "+Inf"`, `"ttftP50Seconds": null`} {
		if !strings.Contains(raw, want) {
			t.Errorf("report.json lacks %s", want)
		}
	}
}

// TestWriteReportEdges checks that degenerate recordings still produce a
// report rather than a panic from gonum (log axes reject values <= 0,
// lines reject NaN and Inf).
func TestWriteReportEdges(t *testing.T) {
	tests := []struct {
		name string
		rec  Recording
	}{
		{"no policies", Recording{Duration: time.Minute, SLO: time.Second}},
		{"zero duration", Recording{Policies: []PolicyRecording{
			{Policy: "p", Requests: []RequestOutcome{served(0, 1)}, Samples: []Sample{pods(0, 1)}}}}},
		{"all unserved, no SLO", Recording{Duration: 2 * time.Minute, Policies: []PolicyRecording{
			{Policy: "p", Requests: []RequestOutcome{unserved(1), unserved(70)}}}}},
		{"zero TTFTs only", Recording{Duration: time.Minute, SLO: time.Second, Policies: []PolicyRecording{
			{Policy: "p", Requests: []RequestOutcome{served(1, 0), served(2, 0)}}}}},
		{"rate without bucket", Recording{Duration: time.Minute, RequestRate: []float64{1, math.NaN()},
			Policies: []PolicyRecording{{Policy: "p"}}}},
		{"rate with NaN", Recording{Duration: time.Minute, RateBucket: 10 * time.Second,
			RequestRate: []float64{1, math.NaN(), math.Inf(1)}, Policies: []PolicyRecording{{Policy: "p"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := WriteReport(dir, tt.rec); err != nil {
				t.Fatalf("WriteReport: %v", err)
			}
			checkPNG(t, filepath.Join(dir, "comparison.png"))
			for _, p := range tt.rec.Policies {
				checkSVG(t, filepath.Join(dir, plotFileName(p.Policy)+".svg"))
			}
		})
	}
}

func TestPlotFileName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"ttft-p90", "ttft-p90"},
		{"../etc/passwd", ".._etc_passwd"},
		{"a b", "a_b"},
		{"..", "policy"},
		{"", "policy"},
	}
	for _, tt := range tests {
		if got := plotFileName(tt.in); got != tt.want {
			t.Errorf("plotFileName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestLogRange(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		name     string
		series   [][]float64
		slo      float64
		lo, infY float64
	}{
		{"values and SLO", [][]float64{{0.5, nan, 4}, {inf, 0}}, 2, 0.25, 40},
		{"SLO below values", [][]float64{{3}}, 1, 0.5, 30},
		{"nothing finite", [][]float64{{inf, nan}}, 0, 0.05, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi, infY := logRange(tt.series, tt.slo)
			if !sameFloat(lo, tt.lo) || !sameFloat(infY, tt.infY) || !(hi > infY) {
				t.Errorf("logRange = %v, %v, %v; want lo %v, infY %v below hi", lo, hi, infY, tt.lo, tt.infY)
			}
		})
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func checkPNG(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("%s does not start with the PNG magic", path)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	bounds := img.Bounds()
	if bounds.Dx() < 500 || bounds.Dy() < 500 {
		t.Errorf("%s is %v, want at least 500x500", path, bounds)
	}
	// A blank canvas would decode too: require something drawn.
	first := img.At(bounds.Min.X, bounds.Min.Y)
	for y := bounds.Min.Y; y < bounds.Max.Y; y += 7 {
		for x := bounds.Min.X; x < bounds.Max.X; x += 7 {
			if img.At(x, y) != first {
				return
			}
		}
	}
	t.Errorf("%s is a single colour", path)
}

func checkSVG(t *testing.T, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := xml.NewDecoder(f)
	var root string
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", path, err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" {
		t.Errorf("%s has root <%s>, want <svg>", path, root)
	}
}
