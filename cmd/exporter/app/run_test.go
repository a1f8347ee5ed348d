package app_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/cmd/exporter/app"
)

// TestRunAttributesPods runs the whole exporter against a real gRPC
// pod-resources server: GPU 0 held by one pod, GPU 1 time-sliced between
// two, and the two MIG instances of GPU 2 each held by a pod. (The sim
// splits every GPU alike; the kubelet would only hand out MIG devices of a
// MIG-mode GPU, which does not matter to the exporter.)
func TestRunAttributesPods(t *testing.T) {
	k := &fakeKubelet{}
	o := simOptions(serveKubelet(t, k))
	o.SimMIGProfiles = "1g.10gb,1g.10gb"
	p := start(t, o)
	base := "http://" + p.addr

	// The sim's UUIDs derive from --hostname; learn them from the API.
	gpus := fetchGPUs(t, base)
	var whole, migs []string
	for _, g := range gpus.GPUs {
		switch {
		case g.MIG == nil:
			whole = append(whole, g.UUID)
		case g.Index == 2:
			migs = append(migs, g.MIG.UUID)
		}
	}
	if len(whole) != 3 || len(migs) != 2 {
		t.Fatalf("GPUs %+v: want 3 GPUs and 2 MIG instances on GPU 2", gpus)
	}
	k.setPods(
		pod("llm", "vllm-0", "vllm", "nvidia.com/gpu", whole[0]),
		pod("team-a", "notebook-a", "jupyter", "nvidia.com/gpu", whole[1]+"::0"),
		// The NVIDIA device plugin's name for time-sliced GPUs when it
		// renames shared resources.
		pod("team-b", "notebook-b", "jupyter", "nvidia.com/gpu.shared", whole[1]+"::1"),
		pod("batch", "embed-0", "worker", "nvidia.com/mig-1g.10gb", migs[0]),
		pod("batch", "embed-1", "worker", "nvidia.com/mig-1g.10gb", migs[1]),
		pod("other", "nic", "c", "example.com/nic", whole[2]), // not a GPU resource
	)

	type want struct{ gpu, gi, namespace, container string }
	wantPods := map[string]want{
		"vllm-0":     {"0", "", "llm", "vllm"},
		"notebook-a": {"1", "", "team-a", "jupyter"},
		"notebook-b": {"1", "", "team-b", "jupyter"},
		"embed-0":    {"2", "", "batch", "worker"},
		"embed-1":    {"2", "", "batch", "worker"},
	}
	eventually(t, "pod labels in /metrics", func() error {
		_, body := get(t, http.DefaultClient, base+"/metrics")
		mfs, err := parseScrape(body)
		if err != nil {
			return err
		}
		got := map[string]map[string]string{}
		for _, m := range mfs["DCGM_FI_DEV_FB_USED"].GetMetric() {
			l := labels(m)
			if prev, dup := got[l["pod"]]; dup && l["pod"] != "" {
				return fmt.Errorf("pod %s on two devices: %v and %v", l["pod"], prev, l)
			}
			got[l["pod"]] = l
		}
		for name, w := range wantPods {
			l, ok := got[name]
			if !ok {
				return fmt.Errorf("no series for pod %s yet", name)
			}
			if l["gpu"] != w.gpu || l["namespace"] != w.namespace || l["container"] != w.container {
				return fmt.Errorf("pod %s: labels %v, want %+v", name, l, w)
			}
			if strings.HasPrefix(name, "embed") && (l["GPU_I_PROFILE"] != "1g.10gb" || l["GPU_I_ID"] == "") {
				return fmt.Errorf("MIG pod %s: labels %v", name, l)
			}
		}
		if _, ok := got["nic"]; ok {
			return fmt.Errorf("a non-GPU resource was attributed: %v", got["nic"])
		}
		// GPU 1 is time-sliced: one utilization series per pod.
		n := 0
		for _, m := range mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric() {
			if labels(m)["gpu"] == "1" {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("time-sliced GPU 1 has %d GPU_UTIL series, want 2", n)
		}
		return nil
	})
}

func TestRunWithoutKubeletSocket(t *testing.T) {
	o := simOptions("/nonexistent/pod-resources/kubelet.sock")
	p := start(t, o)
	eventually(t, "GPU metrics and pod-resources failures", func() error {
		_, body := get(t, http.DefaultClient, "http://"+p.addr+"/metrics")
		mfs, err := parseScrape(body)
		if err != nil {
			return err
		}
		if n := len(mfs["DCGM_FI_DEV_GPU_UTIL"].GetMetric()); n != 3 {
			return fmt.Errorf("%d GPU_UTIL series, want 3", n)
		}
		f := mfs["gpuscale_exporter_podresources_failures_total"]
		if f == nil || f.GetMetric()[0].GetCounter().GetValue() == 0 {
			return fmt.Errorf("gpuscale_exporter_podresources_failures_total = %v, want > 0", f)
		}
		return nil
	})
	if code, body := get(t, http.DefaultClient, "http://"+p.addr+"/healthz"); code != 200 {
		t.Errorf("/healthz without a kubelet: %d %s", code, body)
	}
}

func TestRunWithoutPodAttribution(t *testing.T) {
	p := start(t, simOptions(""))
	eventually(t, "metrics without pod attribution", func() error {
		_, body := get(t, http.DefaultClient, "http://"+p.addr+"/metrics")
		if strings.Contains(body, "gpuscale_exporter_podresources_") {
			return fmt.Errorf("pod-resources metrics with attribution disabled")
		}
		if !strings.Contains(body, "DCGM_FI_DEV_GPU_UTIL{") {
			return fmt.Errorf("no GPU metrics yet")
		}
		if !strings.Contains(body, "gpuscale_build_info{") {
			return fmt.Errorf("no gpuscale_build_info")
		}
		return nil
	})
}

// TestRunNVMLWithoutDriver runs the NVML backend on this machine, which has
// no driver: the exporter listens, stays alive (healthz 200) but unready
// (readyz 503) while it retries, counts the failures, and stops cleanly.
func TestRunNVMLWithoutDriver(t *testing.T) {
	o := app.NewOptions()
	o.Backend = "nvml"
	o.PodResourcesSocket = ""
	o.ListenAddress = "127.0.0.1:0"
	p := start(t, o)
	base := "http://" + p.addr
	if code, body := get(t, http.DefaultClient, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz without NVML: %d %s, want 503", code, body)
	}
	if code, body := get(t, http.DefaultClient, base+"/healthz"); code != http.StatusOK {
		t.Errorf("/healthz while retrying NVML: %d %s, want 200", code, body)
	}
	eventually(t, "an NVML open failure counted", func() error {
		_, body := get(t, http.DefaultClient, base+"/metrics")
		mfs, err := parseScrape(body)
		if err != nil {
			return err
		}
		mf := mfs["gpuscale_exporter_backend_open_failures_total"]
		if mf == nil || mf.GetMetric()[0].GetCounter().GetValue() < 1 {
			return fmt.Errorf("no failure counted yet")
		}
		if _, ok := mfs["DCGM_FI_DEV_GPU_UTIL"]; ok {
			return fmt.Errorf("GPU series served without a backend")
		}
		return nil
	})
	if err := p.stop(); err != nil {
		t.Errorf("Run after cancel = %v, want nil", err)
	}
}

func TestRunStartupErrors(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	tests := []struct {
		name    string
		mutate  func(o *app.Options)
		wantErr string
	}{
		{"bad MIG layout", func(o *app.Options) { o.SimMIGProfiles = "9g.90gb" }, "MIG layout"},
		{"address in use", func(o *app.Options) { o.ListenAddress = busy.Addr().String() }, "listen on"},
		{"missing web config", func(o *app.Options) { o.WebConfigFile = "/nonexistent/web.yml" }, "web.yml"},
	}
	for _, tc := range tests {
		o := simOptions("")
		tc.mutate(o)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := app.Run(ctx, o, testLogger(t), nil)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: Run = %v, want an error mentioning %q", tc.name, err, tc.wantErr)
		}
	}
}

func TestRunShutsDownGracefully(t *testing.T) {
	p := start(t, simOptions(""))
	base := "http://" + p.addr
	if code, _ := get(t, http.DefaultClient, base+"/metrics"); code != 200 {
		t.Fatalf("/metrics: %d", code)
	}
	if err := p.stop(); err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Error("server still answering after Run returned")
	}
}
