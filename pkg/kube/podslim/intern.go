package podslim

import (
	"hash/maphash"
	"maps"
	"reflect"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/lru"
)

// The pods of one Deployment's template have the same labels, the same
// kept annotations, the same owner and the same kept container fields, and
// at 10,000 pods each pod's own copies of them were about 1.2 KiB of the
// 2.8 KiB a slim pod took. Slim therefore shares equal parts between pods:
// a part equal to one a recent pod had is replaced by that pod's. The
// informer's objects are never modified (client-go's rule, which every
// Keep follows by building the slim pod afresh), so sharing them is safe.
//
// The parts are remembered in bounded caches, not for as long as a pod has
// them: a transform sees pods added and updated, never deleted, so it
// cannot count their users. A part evicted from a cache stays with the
// pods that have it, and a later pod with an equal part gets a new one.

// maxInterned bounds each kind of part remembered. A cluster's templates
// are far fewer; a namespace of pods with labels of their own only churns
// the cache, and holds at most this many parts beyond its pods.
const maxInterned = 1024

// interned is one kind of shared part: equal parts by a hash of their
// content, checked for equality on every hit, so that a collision shares
// nothing.
type interned[T any] struct {
	cache *lru.Cache
	hash  func(*maphash.Hash, T)
	equal func(a, b T) bool
}

func newInterned[T any](hash func(*maphash.Hash, T), equal func(a, b T) bool) *interned[T] {
	return &interned[T]{cache: lru.New(maxInterned), hash: hash, equal: equal}
}

var internSeed = maphash.MakeSeed()

// share returns the remembered part equal to v, remembering v when there
// is none.
func (in *interned[T]) share(v T) T {
	var h maphash.Hash
	h.SetSeed(internSeed)
	in.hash(&h, v)
	key := h.Sum64()
	if got, ok := in.cache.Get(key); ok {
		if shared := got.(T); in.equal(shared, v) {
			return shared
		}
		return v // a collision: not shared
	}
	in.cache.Add(key, v)
	return v
}

// The kinds of parts shared, each read by some Keep.
var (
	sharedStrings = newInterned(hashStrings, maps.Equal[map[string]string])
	sharedOwners  = newInterned(hashMarshaled[metav1.OwnerReference], func(a, b []metav1.OwnerReference) bool {
		return reflect.DeepEqual(a, b)
	})
	sharedContainers = newInterned(hashMarshaled[corev1.Container], func(a, b []corev1.Container) bool {
		return reflect.DeepEqual(a, b)
	})
)

// hashStrings hashes a map's pairs in key order.
func hashStrings(h *maphash.Hash, m map[string]string) {
	for _, k := range slices.Sorted(maps.Keys(m)) {
		_, _ = h.WriteString(k)
		_ = h.WriteByte(0xff) // not valid UTF-8: no key runs into its value
		_, _ = h.WriteString(m[k])
		_ = h.WriteByte(0xfe)
	}
}

// marshaler is what the API's generated protobuf code gives every type.
type marshaler interface{ Marshal() ([]byte, error) }

// hashMarshaled hashes the protobuf encoding of each element, which holds
// every field.
func hashMarshaled[T any, PT interface {
	*T
	marshaler
}](h *maphash.Hash, vs []T) {
	for i := range vs {
		b, err := PT(&vs[i]).Marshal()
		if err != nil {
			_ = h.WriteByte(0xfd) // unhashable: equal's check decides
			continue
		}
		_, _ = h.Write(b)
		_ = h.WriteByte(0xfe)
	}
}

// share replaces slim's parts that equal a recent pod's with that pod's.
func share(slim *corev1.Pod) {
	if len(slim.Labels) > 0 {
		slim.Labels = sharedStrings.share(slim.Labels)
	}
	if len(slim.Annotations) > 0 {
		slim.Annotations = sharedStrings.share(slim.Annotations)
	}
	if len(slim.OwnerReferences) > 0 {
		slim.OwnerReferences = sharedOwners.share(slim.OwnerReferences)
	}
	if len(slim.Spec.Containers) > 0 {
		slim.Spec.Containers = sharedContainers.share(slim.Spec.Containers)
	}
	if len(slim.Spec.InitContainers) > 0 {
		slim.Spec.InitContainers = sharedContainers.share(slim.Spec.InitContainers)
	}
}
