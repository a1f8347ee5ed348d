package simworld

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestAssignGPUs(t *testing.T) {
	at := func(sec int) time.Time { return time.Unix(1_700_000_000+int64(sec), 0) }
	key := func(name string) podKey { return podKey{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)} }
	req := func(name string, sec int, gpus ...int) gpuRequest {
		r := gpuRequest{Pod: key(name), Created: at(sec)}
		for i, n := range gpus {
			r.Containers = append(r.Containers, containerRequest{Name: fmt.Sprintf("c%d", i), GPUs: n})
		}
		return r
	}
	tests := []struct {
		name string
		prev map[podKey]allocation
		reqs []gpuRequest
		gpus int
		want map[podKey]allocation
	}{{
		name: "creation order, then lowest free index",
		reqs: []gpuRequest{req("late", 3, 1), req("early", 1, 2), req("middle", 2, 1)},
		gpus: 8,
		want: map[podKey]allocation{
			key("early"): {"c0": {0, 1}}, key("middle"): {"c0": {2}}, key("late"): {"c0": {3}},
		},
	}, {
		name: "same creation time breaks ties by name",
		reqs: []gpuRequest{req("b", 1, 1), req("a", 1, 1)},
		gpus: 8,
		want: map[podKey]allocation{key("a"): {"c0": {0}}, key("b"): {"c0": {1}}},
	}, {
		name: "containers in order",
		reqs: []gpuRequest{req("p", 1, 2, 0, 1)},
		gpus: 4,
		want: map[podKey]allocation{key("p"): {"c0": {0, 1}, "c2": {2}}},
	}, {
		name: "assignments stick; newcomers fill the holes",
		prev: map[podKey]allocation{key("kept"): {"c0": {1, 3}}, key("gone"): {"c0": {0}}},
		reqs: []gpuRequest{req("new", 0, 3), req("kept", 5, 1)},
		gpus: 8,
		// kept keeps 1 and 3 though it now asks for one GPU and new is
		// older; new takes 0 (freed by gone), 2 and 4.
		want: map[podKey]allocation{key("kept"): {"c0": {1, 3}}, key("new"): {"c0": {0, 2, 4}}},
	}, {
		name: "a pod that does not fit waits; later smaller ones go on",
		reqs: []gpuRequest{req("a", 1, 3), req("big", 2, 2), req("small", 3, 1)},
		gpus: 4,
		want: map[podKey]allocation{key("a"): {"c0": {0, 1, 2}}, key("small"): {"c0": {3}}},
	}, {
		name: "a successor with the same name is a new pod",
		prev: map[podKey]allocation{{Namespace: "ns", Name: "web-0", UID: "old"}: {"c0": {0}}},
		reqs: []gpuRequest{{Pod: podKey{Namespace: "ns", Name: "web-0", UID: "new"}, Created: at(1),
			Containers: []containerRequest{{Name: "c0", GPUs: 1}}}},
		gpus: 2,
		want: map[podKey]allocation{{Namespace: "ns", Name: "web-0", UID: "new"}: {"c0": {0}}},
	}, {
		name: "nothing requested, nothing assigned",
		reqs: []gpuRequest{req("cpu", 1, 0)},
		gpus: 2,
		want: map[podKey]allocation{},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := assignGPUs(tc.prev, tc.reqs, tc.gpus)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("assignGPUs = %v, want %v", got, tc.want)
			}
			// Deterministic: the same input in another order gives the
			// same result.
			rev := append([]gpuRequest(nil), tc.reqs...)
			for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
				rev[i], rev[j] = rev[j], rev[i]
			}
			if again := assignGPUs(tc.prev, rev, tc.gpus); !reflect.DeepEqual(again, got) {
				t.Errorf("reordered input gives %v, want %v", again, got)
			}
			// Sticky: feeding the result back changes nothing.
			if again := assignGPUs(got, tc.reqs, tc.gpus); !reflect.DeepEqual(again, got) {
				t.Errorf("reassigning gives %v, want %v", again, got)
			}
		})
	}
}
