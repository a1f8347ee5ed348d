package ingest

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpuscale/gpuscale/pkg/signal"
)

// FuzzGPU feeds arbitrary text through expfmt's parser and GPU: never a
// panic, only its own errors, every value it returns finite and in its
// signal's range, every rejection with a known reason.
func FuzzGPU(f *testing.F) {
	golden, err := os.ReadFile(filepath.Join("..", "..", "metrics", "testdata", "node.golden"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(golden)
	f.Add([]byte(exposition))
	f.Add([]byte(dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "1e300") + dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-b", "p1", "+Inf") + busy))
	f.Add([]byte(dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-a", "p1", "19999") + dcgmSeries("DCGM_FI_DEV_POWER_USAGE", "GPU-b", "p1", "19999") +
		dcgmSeries("DCGM_FI_DEV_FB_USED", "GPU-a", "p1", "4194304") + dcgmSeries("DCGM_FI_DEV_FB_FREE", "GPU-a", "p1", "-1")))
	f.Add([]byte(dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "5") + dcgmSeries("DCGM_FI_DEV_GPU_UTIL", "GPU-a", "p1", "5")))
	f.Add([]byte("# TYPE DCGM_FI_DEV_FB_USED histogram\nDCGM_FI_DEV_FB_USED_bucket{UUID=\"a\",le=\"+Inf\"} 1\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(in))
		if err != nil {
			return
		}
		pods, node, rejected, err := GPU(fams)
		if err != nil {
			if !errors.Is(err, ErrNoGPUSeries) && !errors.Is(err, ErrDuplicateSeries) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		checkServable(t, pods, node)
		for _, r := range rejected {
			if !slices.Contains(RejectReasons[:], r.Reason) || r.Err == nil {
				t.Fatalf("rejection %+v", r)
			}
		}
	})
}

// FuzzRouter: Router never panics, fails only for its own reasons (each
// with a scrape-level Reason), and every held count it returns is a
// request count of a named model.
func FuzzRouter(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("..", "inference", "testdata", "routers", "*.txt"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("dynamo_frontend_queued_requests{model=\"a\"} 1\ndynamo_frontend_queued_requests{model=\"a\"} 2\n"))
	f.Add([]byte("inference_extension_flow_control_queue_size{model_name=\"a\"} -Inf\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := p.TextToMetricFamilies(bytes.NewReader(in))
		if err != nil {
			return
		}
		smp, _, rejected, err := Router(fams)
		if err != nil {
			if Reason(err) == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		for model, v := range smp.Held {
			if model == "" || signal.QueueDepth.Check(v) != nil {
				t.Fatalf("held %q = %v", model, v)
			}
		}
		for _, r := range rejected {
			if !slices.Contains(RejectReasons[:], r.Reason) || r.Err == nil {
				t.Fatalf("rejection %+v", r)
			}
		}
	})
}
