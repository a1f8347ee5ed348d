package podresources

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// FuzzBuildAssignments feeds arbitrary List responses, as the kubelet's
// socket would deliver them (protobuf wire bytes), through buildAssignments:
// it must not panic, and what it returns must come from the response and be
// no larger than it.
func FuzzBuildAssignments(f *testing.F) {
	seeds := []*podresourcesv1.ListPodResourcesResponse{
		{},
		{PodResources: []*podresourcesv1.PodResources{
			pod("llm", "vllm-0", ctr("vllm", dev("nvidia.com/gpu", "GPU-a"))),
			pod("team-a", "nb-a", ctr("jupyter", dev("nvidia.com/gpu", "GPU-b::0"))),
			pod("team-b", "nb-b", ctr("jupyter", dev("nvidia.com/gpu.shared", "GPU-b::1", "GPU-b::1"))),
			pod("batch", "embed-0", ctr("worker", dev("nvidia.com/mig-1g.10gb", "MIG-c"), dev("example.com/nic", "eth1"))),
		}},
		{PodResources: []*podresourcesv1.PodResources{
			pod("", "", ctr("", dev("", "::1", "", "GPU-x::", "GPU-x::y", "::"))),
			pod("a", "b", ctr("c", dev("nvidia.com/mig-", strings.Repeat("GPU-", 100)))),
		}},
	}
	for _, s := range seeds {
		b, err := proto.Marshal(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x0a, 0x00})
	f.Add([]byte("\x0a\x05\x0a\x03\xff\xfe\xfd"))

	f.Fuzz(func(t *testing.T, data []byte) {
		var resp podresourcesv1.ListPodResourcesResponse
		if err := proto.Unmarshal(data, &resp); err != nil {
			return // gRPC would have refused it too
		}
		ids, holders := 0, map[PodRef]bool{}
		for _, p := range resp.GetPodResources() {
			for _, c := range p.GetContainers() {
				holders[PodRef{Namespace: p.GetNamespace(), Pod: p.GetName(), Container: c.GetName()}] = true
				for _, d := range c.GetDevices() {
					ids += len(d.GetDeviceIds())
				}
			}
		}
		for _, patterns := range [][]string{DefaultResourceNames(), {"*"}} {
			a := buildAssignments(&resp, patterns)
			if a == nil {
				t.Fatal("nil Assignments")
			}
			refs := 0
			for id, rs := range a {
				if id == "" || !strings.Contains(string(data), id) {
					t.Errorf("device %q is not a device ID of the response", id)
				}
				if len(rs) == 0 {
					t.Errorf("device %q without holders", id)
				}
				if !slices.IsSortedFunc(rs, comparePodRef) || len(slices.CompactFunc(slices.Clone(rs), func(x, y PodRef) bool { return x == y })) != len(rs) {
					t.Errorf("device %q: holders %v not sorted and unique", id, rs)
				}
				for _, r := range rs {
					if !holders[r] {
						t.Errorf("device %q: holder %+v is no container of the response", id, r)
					}
				}
				refs += len(rs)
			}
			// Every entry stems from one device ID of the response.
			if len(a) > ids || refs > ids {
				t.Errorf("%d devices and %d holders from %d device IDs", len(a), refs, ids)
			}
		}
	})
}
