package podresources

import (
	"reflect"
	"testing"

	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// TestBuildAssignmentsNil checks that nil entries, which the wire format
// cannot carry but a caller could build, are skipped rather than panicking.
func TestBuildAssignmentsNil(t *testing.T) {
	resp := &podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{
		nil,
		pod("default", "a", nil, ctr("main", nil, dev("nvidia.com/gpu", "", "GPU-1"))),
	}}
	want := Assignments{"GPU-1": {{Namespace: "default", Pod: "a", Container: "main"}}}
	if got := buildAssignments(resp, DefaultResourceNames()); !reflect.DeepEqual(got, want) {
		t.Errorf("buildAssignments() = %v, want %v", got, want)
	}
	if got := buildAssignments(nil, DefaultResourceNames()); got == nil || len(got) != 0 {
		t.Errorf("buildAssignments(nil) = %#v, want empty non-nil", got)
	}
}

func TestNormalizeDeviceID(t *testing.T) {
	tests := []struct{ in, want string }{
		{"GPU-a", "GPU-a"},
		{"GPU-a::0", "GPU-a"},
		{"GPU-a::17", "GPU-a"},
		{"MIG-b::3", "MIG-b"},
		{"GPU-a::", "GPU-a::"},
		{"GPU-a::x", "GPU-a::x"},
		{"::1", "::1"},
		{"", ""},
	}
	for _, tc := range tests {
		if got := normalizeDeviceID(tc.in); got != tc.want {
			t.Errorf("normalizeDeviceID(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestMatchResource(t *testing.T) {
	defaults := DefaultResourceNames()
	tests := []struct {
		patterns []string
		name     string
		want     bool
	}{
		{defaults, "nvidia.com/gpu", true},
		{defaults, "nvidia.com/gpu.shared", true},
		{defaults, "nvidia.com/mig-1g.10gb", true},
		{defaults, "nvidia.com/mig-3g.40gb.shared", true},
		{defaults, "nvidia.com/gpux", false},
		{defaults, "example.com/foo", false},
		{defaults, "", false},
		{[]string{"*"}, "anything", true},
		{[]string{"example.com/foo"}, "example.com/foo", true},
		{nil, "nvidia.com/gpu", false},
	}
	for _, tc := range tests {
		if got := matchResource(tc.patterns, tc.name); got != tc.want {
			t.Errorf("matchResource(%q, %q) = %v, want %v", tc.patterns, tc.name, got, tc.want)
		}
	}
}
