// Package zerocopy converts the adapter's custom-metrics lists to the
// version it serves without copying their items.
//
// custom-metrics-apiserver builds every answer in the internal
// custom_metrics types, and the API server's codec converts it to the
// version the client asked for before encoding it. For v1beta2, the HPA
// controller's version, the generated conversion allocates a second array
// of items and copies each one: at 10,000 pods 2.5 MB a list, half of what
// a list allocates, for an array identical byte for byte. conversion-gen
// shares memory between two types whose layouts are identical
// (unsafe.Pointer casts fill zz_generated.conversion.go); it does not here
// only because k8s.io/metrics converts ObjectReference by hand. Register
// makes the list's conversion share the array when the item types are
// laid out alike, which SameLayout checks field by field when the adapter
// starts, so a k8s.io/metrics release that changes either type leaves the
// generated conversion in place.
package zerocopy

import (
	"fmt"
	"reflect"
	"unsafe"

	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

// Register adds to s a conversion from the internal MetricValueList to
// v1beta2's that shares the items' array, when the item types have one
// layout. It reports whether it did; when they differ, s keeps the
// generated conversion.
//
// The list converted shares its items with the internal one. The API
// server's codec converts with the scheme's unsafe convertor, whose output
// may share memory with its input, and discards the input once it has
// encoded the output; the scheme's safe conversions copy their input
// first.
func Register(s *runtime.Scheme) (bool, error) {
	if !SameLayout(reflect.TypeFor[custom_metrics.MetricValue](), reflect.TypeFor[cmv1beta2.MetricValue]()) {
		return false, nil
	}
	if err := s.AddConversionFunc((*custom_metrics.MetricValueList)(nil), (*cmv1beta2.MetricValueList)(nil), convertList); err != nil {
		return false, fmt.Errorf("custom metrics list conversion: %w", err)
	}
	return true, nil
}

// convertList is the internal list as a v1beta2 list, sharing its items.
func convertList(a, b any, _ conversion.Scope) error {
	in, ok := a.(*custom_metrics.MetricValueList)
	if !ok {
		return fmt.Errorf("converting %T: not a %T", a, in)
	}
	out, ok := b.(*cmv1beta2.MetricValueList)
	if !ok {
		return fmt.Errorf("converting to %T: not a %T", b, out)
	}
	out.ListMeta = in.ListMeta
	out.Items = *(*[]cmv1beta2.MetricValue)(unsafe.Pointer(&in.Items))
	return nil
}

// SameLayout reports whether a value of type a can be read as one of type
// b: the same kind, size and alignment, and, inside, fields of the same
// names at the same offsets whose types are laid out alike, down to types
// that are the same on both sides. Maps, interfaces, functions, channels
// and unsafe pointers match only themselves.
func SameLayout(a, b reflect.Type) bool {
	return sameLayout(a, b, map[[2]reflect.Type]bool{})
}

func sameLayout(a, b reflect.Type, seen map[[2]reflect.Type]bool) bool {
	if a == b {
		return true
	}
	if a.Kind() != b.Kind() || a.Size() != b.Size() || a.Align() != b.Align() {
		return false
	}
	pair := [2]reflect.Type{a, b}
	if seen[pair] {
		// A recursive type: assumed alike here, checked where first met.
		return true
	}
	seen[pair] = true
	switch a.Kind() {
	case reflect.Struct:
		if a.NumField() != b.NumField() {
			return false
		}
		for i := range a.NumField() {
			fa, fb := a.Field(i), b.Field(i)
			if fa.Name != fb.Name || fa.Offset != fb.Offset || !sameLayout(fa.Type, fb.Type, seen) {
				return false
			}
		}
		return true
	case reflect.Array:
		return a.Len() == b.Len() && sameLayout(a.Elem(), b.Elem(), seen)
	case reflect.Pointer, reflect.Slice:
		return sameLayout(a.Elem(), b.Elem(), seen)
	case reflect.Map, reflect.Interface, reflect.Func, reflect.Chan, reflect.UnsafePointer:
		// A map's hashing and an interface's methods go with its type.
		return false
	default: // booleans, numbers, strings
		return true
	}
}
