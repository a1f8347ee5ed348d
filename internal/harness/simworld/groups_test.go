package simworld

import (
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
)

// TestGroupWorkersFollowLeader: the GPUs of a LeaderWorkerSet group's
// workers, on another node, are as busy as its leader's server; a pod of
// no group on the same node stays idle.
func TestGroupWorkersFollowLeader(t *testing.T) {
	member := func(worker string) podOpt {
		return withLabels(podgroup.SetLabel, "llm", podgroup.GroupIndexLabel, "0", podgroup.WorkerIndexLabel, worker, "role", "r"+worker)
	}
	const workerImage = "gpuscale.io/worker"
	tw := startWorld(t,
		node("n11", 2), node("n12", 2),
		pod("kube-system", "exporter-n11", "n11", podIP(11, 1), ExporterImage),
		pod("kube-system", "exporter-n12", "n12", podIP(11, 2), ExporterImage),
		pod("llm", "llm-0", "n11", podIP(11, 3), InferenceImage, withGPUs(1), createdAt(1), member("0")),
		pod("llm", "llm-0-1", "n12", podIP(11, 4), workerImage, withGPUs(1), createdAt(2), member("1")),
		pod("llm", "alone", "n12", podIP(11, 5), workerImage, withGPUs(1), createdAt(3)),
	)
	tw.SetRate("llm", labels.SelectorFromSet(labels.Set{"role": "r0"}), 12)
	url := "http://" + podIP(11, 2) + ":9400/metrics"
	eventually(t, 10*time.Second, "the worker's GPU busy with its leader", func() error {
		util, pods, err := gpuSeries(url, "DCGM_FI_DEV_GPU_UTIL")
		if err != nil {
			return err
		}
		mem, _, err := gpuSeries(url, "DCGM_FI_DEV_FB_USED")
		if err != nil {
			return err
		}
		if pods["0"] != "llm/llm-0-1" || util["0"] <= 50 || mem["0"] < weightsMiB {
			return fmt.Errorf("GPU 0 held by %q at %v%%, %v MiB; want the worker's above 50%% with the model's weights", pods["0"], util["0"], mem["0"])
		}
		if pods["1"] != "llm/alone" || util["1"] != 0 {
			return fmt.Errorf("GPU 1 held by %q at %v%%, want the lone pod's idle", pods["1"], util["1"])
		}
		return nil
	})
}
