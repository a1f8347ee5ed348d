package inference

import (
	"bytes"
	"os"
	"testing"
)

// The parse benchmarks compare expfmt's two decoders on one vLLM scrape: the
// OpenMetrics one validates every line against the ABNF grammar and is
// orders of magnitude slower, so scrapers should ask for the text format.
func BenchmarkParseTextVLLM(b *testing.B) {
	in, _ := os.ReadFile("testdata/vllm.txt")
	for b.Loop() {
		parseText(b, bytes.NewReader(in))
	}
}

func BenchmarkParseOpenMetricsVLLM(b *testing.B) {
	in, _ := os.ReadFile("testdata/vllm_openmetrics.txt")
	for b.Loop() {
		parseOpenMetrics(bytes.NewReader(in))
	}
}

func BenchmarkDetectVLLM(b *testing.B) {
	in, _ := os.ReadFile("testdata/vllm.txt")
	fams, _ := parseText(b, bytes.NewReader(in))
	b.ReportAllocs()
	for b.Loop() {
		Detect(fams)
	}
}
