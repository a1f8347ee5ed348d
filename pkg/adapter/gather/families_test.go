package gather

import (
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/ingest"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
)

// textServer serves body as the classic text format.
func textServer(t *testing.T, body []byte) string {
	t.Helper()
	srv, _ := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		_, _ = w.Write(body)
	}))
	return srv.URL
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// scrapeBoth serves body and scrapes it whole and as the gatherer scrapes
// a target of kind.
func scrapeBoth(t *testing.T, s *scrape.Scraper, body []byte, kind discovery.Kind) (all, read map[string]*dto.MetricFamily) {
	t.Helper()
	url := textServer(t, body)
	all, err := s.Scrape(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	read, err = s.ScrapeFamilies(t.Context(), url, readFamilies[kind])
	if err != nil {
		t.Fatal(err)
	}
	return all, read
}

// TestReadFamiliesKeepWhatIngestReads scrapes real expositions whole and as
// the gatherer does, skipping the families ingest does not read: ingest
// must make the same samples of both, warnings and errors included.
func TestReadFamiliesKeepWhatIngestReads(t *testing.T) {
	s := scrape.New(scrape.Config{})
	inference := []struct {
		name string
		body []byte
	}{
		{"vLLM", readFile(t, "../inference/testdata/vllm.txt")},
		{"vLLM v0", readFile(t, "../inference/testdata/vllm_v0.txt")},
		{"SGLang", readFile(t, "../inference/testdata/sglang.txt")},
		{"TGI", readFile(t, "../inference/testdata/tgi.txt")},
		{"Triton", readFile(t, "../inference/testdata/triton.txt")},
		{"vLLM without any signal", []byte("# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 5\n")},
		{"TTFT without a TYPE line", []byte("vllm:num_requests_waiting 1\nvllm:time_to_first_token_seconds_bucket{le=\"+Inf\"} 3\n")},
		{"TTFT not a histogram", []byte("# TYPE vllm:time_to_first_token_seconds gauge\nvllm:time_to_first_token_seconds 3\nvllm:num_requests_waiting 1\n")},
		{"two dialects", []byte("tgi_queue_size 2\nvllm:num_requests_waiting 1\nvllm:num_requests_running 3\n")},
		{"no dialect", []byte("process_cpu_seconds_total 3\n")},
	}
	for _, tt := range inference {
		t.Run(tt.name, func(t *testing.T) {
			all, read := scrapeBoth(t, s, tt.body, discovery.KindInference)
			if len(read) > len(all) {
				t.Errorf("parsed %d families of %d", len(read), len(all))
			}
			wantS, wantD, wantRej, wantErr := ingest.Inference(all)
			gotS, gotD, gotRej, gotErr := ingest.Inference(read)
			if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
				t.Fatalf("error %v, want %v", gotErr, wantErr)
			}
			if gotD != wantD || !reflect.DeepEqual(gotS, wantS) || !reflect.DeepEqual(gotRej, wantRej) {
				t.Errorf("got %s %+v %v, want %s %+v %v", gotD, gotS, gotRej, wantD, wantS, wantRej)
			}
		})
	}
	t.Run("exporter", func(t *testing.T) {
		all, read := scrapeBoth(t, s, readFile(t, filepath.Join("..", "..", "metrics", "testdata", "node.golden")), discovery.KindExporter)
		if len(read) >= len(all) {
			t.Errorf("parsed %d families of %d", len(read), len(all))
		}
		wantPods, wantNode, wantRej, wantErr := ingest.GPU(all)
		gotPods, gotNode, gotRej, gotErr := ingest.GPU(read)
		if wantErr != nil || gotErr != nil || len(wantRej)+len(gotRej) > 0 || !reflect.DeepEqual(gotPods, wantPods) || !reflect.DeepEqual(gotNode, wantNode) {
			t.Errorf("got %v %v %+v %+v, want %v %v %+v %+v", gotErr, gotRej, gotPods, gotNode, wantErr, wantRej, wantPods, wantNode)
		}
	})
}
