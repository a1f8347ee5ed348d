package processpods

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/exporter"
	"github.com/gpuscale/gpuscale/pkg/metrics"
)

type fakeIndex map[string]Container

func (f fakeIndex) Lookup(id string) (Container, bool) { c, ok := f[id]; return c, ok }

func TestProcessPods(t *testing.T) {
	const (
		uid   = "0b1d4c2e-8f3a-4d5b-9c6e-7f8a9b0c1d2e"
		other = "11111111-2222-3333-4444-555555555555"
		ctr   = "3f4e5d6c7b8a99887766554433221100ffeeddccbbaa99887766554433221100"
		ctr2  = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	)
	root := t.TempDir()
	for pid, cg := range map[string]string{
		"10": "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + uid + ".slice/cri-containerd-" + ctr + ".scope\n",
		"11": "0::/system.slice/nvidia-persistenced.service\n",
		"12": "11:memory:/kubepods/burstable/pod" + uid + "/" + ctr2 + "\n",
		"13": "0::/kubepods/pod" + other + "/" + ctr + "\n",
	} {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(cg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := Resolver{Cgroups: CgroupReader{Root: root}, Containers: fakeIndex{
		ctr: {Namespace: "llm", Pod: "vllm-0", PodUID: uid, Name: "vllm"},
	}}
	tests := []struct {
		pid    uint32
		want   metrics.PodRef
		reason string
	}{
		{10, metrics.PodRef{Namespace: "llm", Pod: "vllm-0", Container: "vllm"}, ""},
		{11, metrics.PodRef{}, exporter.ReasonNotInPod},
		{12, metrics.PodRef{}, exporter.ReasonUnknownContainer},
		{13, metrics.PodRef{}, exporter.ReasonPodMismatch},
		{14, metrics.PodRef{}, exporter.ReasonNoCgroup}, // exited
	}
	for _, tt := range tests {
		if got, reason := p.PodOf(tt.pid); got != tt.want || reason != tt.reason {
			t.Errorf("PodOf(%d) = %+v, %q; want %+v, %q", tt.pid, got, reason, tt.want, tt.reason)
		}
	}
}
