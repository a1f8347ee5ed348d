package scaledown

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/kube/podgroup"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// setLoadKV is setLoad with the KV cache in use, in percent.
func (f *fixture) setLoadKV(ns, name string, queued, running, kv float64) {
	var s store.Sample
	s.Time = f.clock.Now()
	s.Set(signal.QueueDepth, queued)
	s.Set(signal.RequestsRunning, running)
	s.Set(signal.KVCacheUtilization, kv)
	f.store.PutPod(store.Key{Namespace: ns, Name: name}, signal.SourceInference, s)
}

// TestCostRequestsThenKV: the replica whose removal cuts the least work
// goes first: fewest requests in flight, then, among replicas with about
// as many, the least KV cache in use; unknown load last.
func TestCostRequestsThenKV(t *testing.T) {
	objs := []runtime.Object{gpuNode("n", 8)}
	names := []string{"idle", "two-light", "two-mid", "two-full", "three-light", "busy-light", "unknown", "one-no-kv"}
	for _, name := range names {
		objs = append(objs, pod("ns", name, "n", 1, true))
	}
	f := newFixture(t, Config{}, objs...)
	f.setLoadKV("ns", "idle", 0, 0, 0)
	f.setLoadKV("ns", "two-full", 0, 2, 90)
	f.setLoadKV("ns", "two-mid", 1, 1, 50)
	f.setLoadKV("ns", "two-light", 0, 2, 10)
	f.setLoadKV("ns", "three-light", 0, 3, 5) // 1-3 in flight share a tier
	f.setLoadKV("ns", "busy-light", 4, 12, 1) // more in flight outranks less KV
	f.setLoad("ns", "one-no-kv", 0, 1)        // no KV gauge: by requests alone
	f.reconcile()
	want := []string{"idle", "one-no-kv", "three-light", "two-light", "two-mid", "two-full", "busy-light", "unknown"}
	got := slices.Clone(names)
	costs := map[string]int{}
	for _, n := range names {
		costs[n] = f.cost("ns", n)
	}
	slices.SortStableFunc(got, func(a, b string) int { return costs[a] - costs[b] })
	if !slices.Equal(got, want) {
		t.Errorf("order by cost = %v (costs %v), want %v", got, costs, want)
	}
}

// lwsPod is a pod of LeaderWorkerSet set's group, worker index w (0 is the
// leader), on node with gpus GPUs.
func lwsPod(set string, group, w int, node string, gpus int64) *corev1.Pod {
	name := fmt.Sprintf("%s-%d", set, group)
	if w > 0 {
		name += fmt.Sprintf("-%d", w)
	}
	p := pod("ns", name, node, gpus, true)
	p.Labels[podgroup.SetLabel] = set
	p.Labels[podgroup.GroupIndexLabel] = strconv.Itoa(group)
	p.Labels[podgroup.WorkerIndexLabel] = strconv.Itoa(w)
	return p
}

// TestGroupsRankTogether: every pod of a LeaderWorkerSet group carries its
// group's one cost, and a group is as busy as its leader (workers serve no
// requests of their own): a serving leader protects its workers too.
func TestGroupsRankTogether(t *testing.T) {
	objs := []runtime.Object{gpuNode("a", 8), gpuNode("b", 8)}
	for g := range 2 {
		for w := range 2 {
			objs = append(objs, lwsPod("llm", g, w, []string{"a", "b"}[w], 4))
		}
	}
	f := newFixture(t, Config{}, objs...)
	f.setLoad("ns", "llm-0", 0, 0)
	f.setLoad("ns", "llm-1", 2, 5)
	f.reconcile()
	for g := range 2 {
		leader, worker := fmt.Sprintf("llm-%d", g), fmt.Sprintf("llm-%d-1", g)
		if lc, wc := f.cost("ns", leader), f.cost("ns", worker); lc != wc {
			t.Errorf("group %d: leader cost %d, worker cost %d; want one cost", g, lc, wc)
		}
	}
	if f.cost("ns", "llm-0") >= f.cost("ns", "llm-1") {
		t.Errorf("the idle group costs %d, the serving one %d; want the idle one first", f.cost("ns", "llm-0"), f.cost("ns", "llm-1"))
	}
	if a := f.annotations("ns", "llm-1-1"); a[SafeToEvictAnnotation] != "false" {
		t.Errorf("the serving group's worker is not protected: %v", a)
	}
	if a := f.annotations("ns", "llm-0-1"); a[SafeToEvictAnnotation] != "" {
		t.Errorf("the idle group's worker is protected: %v", a)
	}
}

// TestGroupsFreeWholeNodes: with groups spread over nodes, removing the
// k lowest-cost groups frees as many nodes as the best choice of k groups
// does, for every k (checked against every choice), on placements where
// ranking pods, or nodes in a fixed order, does worse.
func TestGroupsFreeWholeNodes(t *testing.T) {
	type member = groupMember
	tests := []struct {
		name    string
		members []member
	}{
		// Six groups of two pods over three nodes of four pods each.
		{"spread", []member{{0, "a"}, {0, "b"}, {1, "a"}, {1, "c"}, {2, "b"}, {2, "c"}, {3, "a"}, {3, "a"}, {4, "b"}, {4, "b"}, {5, "c"}, {5, "c"}}},
		// Node a is emptiest by pods, but its groups also hold c; b holds
		// one two-pod group of its own.
		{"a group's other node", []member{{0, "a"}, {0, "c"}, {1, "b"}, {1, "b"}, {2, "c"}, {2, "c"}, {3, "c"}, {3, "d"}, {4, "d"}, {4, "d"}, {5, "d"}, {5, "a"}}},
		{"one node per group", []member{{0, "a"}, {0, "a"}, {1, "b"}, {1, "b"}, {2, "c"}, {2, "c"}, {3, "a"}, {3, "a"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := []runtime.Object{}
			nodes := map[string]bool{}
			workers := map[int]int{}
			for _, m := range tt.members {
				if !nodes[m.node] {
					nodes[m.node] = true
					objs = append(objs, gpuNode(m.node, 8))
				}
				objs = append(objs, lwsPod("llm", m.group, workers[m.group], m.node, 2))
				workers[m.group]++
			}
			f := newFixture(t, Config{}, objs...)
			for g := range workers {
				f.setLoad("ns", fmt.Sprintf("llm-%d", g), 0, 0)
			}
			f.reconcile()
			groupCost := map[int]int{}
			for _, m := range tt.members {
				groupCost[m.group] = f.cost("ns", fmt.Sprintf("llm-%d", m.group))
			}
			order := slices.Sorted(maps.Keys(groupCost))
			slices.SortStableFunc(order, func(a, b int) int { return groupCost[a] - groupCost[b] })
			for k := 1; k < len(order); k++ {
				got := freed(tt.members, order[:k])
				best := 0
				for _, choice := range combinations(len(order), k) {
					best = max(best, freed(tt.members, choice))
				}
				if got < best {
					t.Errorf("removing the %d cheapest groups %v frees %d nodes; the best %d groups free %d", k, order[:k], got, k, best)
				}
			}
		})
	}
}

// groupMember is a pod of a group on a node.
type groupMember struct {
	group int
	node  string
}

// freed counts the nodes left empty when the groups removed go.
func freed(members []groupMember, removed []int) int {
	left := map[string]int{}
	for _, m := range members {
		left[m.node] += 0
	}
	for _, m := range members {
		if !slices.Contains(removed, m.group) {
			left[m.node]++
		}
	}
	n := 0
	for _, c := range left {
		if c == 0 {
			n++
		}
	}
	return n
}

// combinations lists every k-subset of 0..n-1.
func combinations(n, k int) [][]int {
	if k == 0 {
		return [][]int{nil}
	}
	var out [][]int
	for first := 0; first < n; first++ {
		for _, rest := range combinations(n-first-1, k-1) {
			c := []int{first}
			for _, r := range rest {
				c = append(c, first+1+r)
			}
			out = append(out, c)
		}
	}
	return out
}

// TestGroupRankingRandomPlacements measures the ranking on the end-to-end
// test's shape: six groups of two 2-GPU pods filling three 8-GPU nodes,
// placed at random (3,000 placements, a fixed seed), scaled to 3, 2 and 1
// groups by removing the lowest costs at once. It reports how often that
// frees as many nodes as the best choice of groups, and as LeaderWorkerSet's
// own order (the highest indexes first) does. A deletion cost is one
// order for every scale-down size, and none is best for all: keeping one
// group is best done by keeping a group on one node, which removing two
// compact groups first rules out. Scaled to half, it is always best.
func TestGroupRankingRandomPlacements(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const trials = 3000
	for _, keep := range []int{3, 2, 1} {
		var optimal, lwsWorse, lwsBetter int
		for range trials {
			var slots []string
			for _, n := range []string{"n1", "n2", "n3"} {
				slots = append(slots, n, n, n, n)
			}
			rng.Shuffle(len(slots), func(i, j int) { slots[i], slots[j] = slots[j], slots[i] })
			var members []groupMember
			var managed []managedPod
			gpuPods := map[string]int{}
			for i, n := range slots {
				members = append(members, groupMember{i / 2, n})
				managed = append(managed, managedPod{pod: lwsPod("llm", i/2, i%2, n, 2), load: load{known: true}})
				gpuPods[n]++
			}
			var order []int
			for _, mp := range rankReplicas(replicasOf(managed), gpuPods, DefaultGPUResource) {
				if g, _ := podgroup.Of(mp.pod); !slices.Contains(order, g.Index) {
					order = append(order, g.Index)
				}
			}
			k := 6 - keep
			got, lws, best := freed(members, order[:k]), freed(members, []int{5, 4, 3, 2, 1}[:k]), 0
			for _, c := range combinations(6, k) {
				best = max(best, freed(members, c))
			}
			if got == best {
				optimal++
			}
			if got > lws {
				lwsWorse++
			}
			if got < lws {
				lwsBetter++
			}
		}
		t.Logf("FIGURE groups 6 -> %d on random placements: deletion costs free the most nodes possible in %d of %d; more than LeaderWorkerSet's order in %d, fewer in %d",
			keep, optimal, trials, lwsWorse, lwsBetter)
		if keep == 3 && optimal != trials {
			t.Errorf("6 -> 3 groups: best in %d of %d placements, want all", optimal, trials)
		}
	}
}
