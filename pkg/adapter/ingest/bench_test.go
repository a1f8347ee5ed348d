package ingest

import (
	"os"
	"path/filepath"
	"testing"
)

// The ingest benchmarks cost one scrape's validation: at 10,000 inference
// pods every 5 s it runs 2,000 times a second.
func BenchmarkInferenceVLLM(b *testing.B) {
	in, err := os.ReadFile(filepath.Join("..", "inference", "testdata", "vllm.txt"))
	if err != nil {
		b.Fatal(err)
	}
	fams := parse(b, string(in))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := Inference(fams); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGPUNode(b *testing.B) {
	in, err := os.ReadFile(filepath.Join("..", "..", "metrics", "testdata", "node.golden"))
	if err != nil {
		b.Fatal(err)
	}
	fams := parse(b, string(in))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := GPU(fams); err != nil {
			b.Fatal(err)
		}
	}
}
