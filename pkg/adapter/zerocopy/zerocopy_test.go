package zerocopy

import (
	"io"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cminstall "k8s.io/metrics/pkg/apis/custom_metrics/install"
	cmv1beta1 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta1"
	cmv1beta2 "k8s.io/metrics/pkg/apis/custom_metrics/v1beta2"
)

type (
	pair       struct{ A, B int64 }
	pairAlike  struct{ A, B int64 }
	pairNamed  struct{ A, C int64 }
	pairSwap   struct{ B, A int64 }
	pairNarrow struct {
		A int32
		B int64
	}
	withPtr      struct{ P *pair }
	withPtrAlike struct{ P *pairAlike }
	withPtrOther struct{ P *pairNarrow }
	node         struct {
		Next *node
		V    string
	}
	nodeAlike struct {
		Next *nodeAlike
		V    string
	}
	withMap      struct{ M map[string]pair }
	withMapAlike struct{ M map[string]pairAlike }
	withIface    struct{ E error }
	withIface2   struct{ E interface{ Error() string } }
	uid          string
)

func TestSameLayout(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b reflect.Type
		want bool
	}{
		{"the same type", reflect.TypeFor[pair](), reflect.TypeFor[pair](), true},
		{"alike", reflect.TypeFor[pair](), reflect.TypeFor[pairAlike](), true},
		{"a field renamed", reflect.TypeFor[pair](), reflect.TypeFor[pairNamed](), false},
		{"fields swapped", reflect.TypeFor[pair](), reflect.TypeFor[pairSwap](), false},
		{"a field narrower", reflect.TypeFor[pair](), reflect.TypeFor[pairNarrow](), false},
		{"a named string", reflect.TypeFor[string](), reflect.TypeFor[uid](), true},
		{"int32 and int64", reflect.TypeFor[int32](), reflect.TypeFor[int64](), false},
		{"pointers to alike", reflect.TypeFor[withPtr](), reflect.TypeFor[withPtrAlike](), true},
		{"pointers to unalike", reflect.TypeFor[withPtr](), reflect.TypeFor[withPtrOther](), false},
		{"slices of alike", reflect.TypeFor[[]pair](), reflect.TypeFor[[]pairAlike](), true},
		{"arrays of other lengths", reflect.TypeFor[[2]pair](), reflect.TypeFor[[3]pair](), false},
		{"recursive alike", reflect.TypeFor[node](), reflect.TypeFor[nodeAlike](), true},
		{"maps only when the same", reflect.TypeFor[withMap](), reflect.TypeFor[withMapAlike](), false},
		{"interfaces only when the same", reflect.TypeFor[withIface](), reflect.TypeFor[withIface2](), false},
		{"custom metrics: internal and v1beta2", reflect.TypeFor[custom_metrics.MetricValue](), reflect.TypeFor[cmv1beta2.MetricValue](), true},
		{"custom metrics: internal and v1beta1", reflect.TypeFor[custom_metrics.MetricValue](), reflect.TypeFor[cmv1beta1.MetricValue](), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := SameLayout(tc.a, tc.b); got != tc.want {
				t.Errorf("SameLayout(%v, %v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// list is an internal list with every field of an item set somewhere.
func list() *custom_metrics.MetricValueList {
	window := int64(60)
	ts := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	l := &custom_metrics.MetricValueList{ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "c"}}
	for i, v := range []string{"3", "250m", "1.5Gi", "-2"} {
		item := custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "llm-" + v, UID: types.UID("u-" + v), APIVersion: "v1", ResourceVersion: "9", FieldPath: "f"},
			Metric:          custom_metrics.MetricIdentifier{Name: "inference_queue_depth"},
			Timestamp:       ts,
			Value:           resource.MustParse(v),
		}
		if i%2 == 0 {
			item.WindowSeconds = &window
			item.Metric.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}, MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}}}}
		}
		l.Items = append(l.Items, item)
	}
	return l
}

func scheme(t *testing.T, zeroCopy bool) *runtime.Scheme {
	t.Helper()
	s := runtime.NewScheme()
	cminstall.Install(s)
	if zeroCopy {
		ok, err := Register(s)
		if err != nil || !ok {
			t.Fatalf("Register = %v, %v; want true, nil", ok, err)
		}
	}
	return s
}

// TestConversionShares checks the registered conversion against the
// generated one, item for item, and that it copied nothing.
func TestConversionShares(t *testing.T) {
	in := list()
	var want cmv1beta2.MetricValueList
	if err := cmv1beta2.Convert_custom_metrics_MetricValueList_To_v1beta2_MetricValueList(list(), &want, nil); err != nil {
		t.Fatal(err)
	}
	got, err := runtime.UnsafeObjectConvertor(scheme(t, true)).ConvertToVersion(in, cmv1beta2.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	out, ok := got.(*cmv1beta2.MetricValueList)
	if !ok {
		t.Fatalf("converted to %T", got)
	}
	if !equality.Semantic.DeepEqual(out.Items, want.Items) || !equality.Semantic.DeepEqual(out.ListMeta, want.ListMeta) {
		t.Errorf("zero-copy conversion:\n%+v\nwant the generated conversion's:\n%+v", out, &want)
	}
	if unsafe.Pointer(&out.Items[0]) != unsafe.Pointer(&in.Items[0]) {
		t.Error("the converted list's items are a copy")
	}

	// A conversion the scheme makes safely copies its input first.
	safe, err := scheme(t, true).ConvertToVersion(in, cmv1beta2.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	if unsafe.Pointer(&safe.(*cmv1beta2.MetricValueList).Items[0]) == unsafe.Pointer(&in.Items[0]) {
		t.Error("a safe conversion shares the items")
	}
}

// TestEncoding encodes a list as the API server does, converting it to
// v1beta2 on the way, with the generated conversion and with Register's,
// and expects the same bytes.
func TestEncoding(t *testing.T) {
	for _, mediaType := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		t.Run(mediaType, func(t *testing.T) {
			var encoded [2][]byte
			for i, zeroCopy := range []bool{false, true} {
				codecs := serializer.NewCodecFactory(scheme(t, zeroCopy))
				info, ok := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), mediaType)
				if !ok {
					t.Fatalf("no serializer for %s", mediaType)
				}
				b, err := runtime.Encode(codecs.EncoderForVersion(info.Serializer, cmv1beta2.SchemeGroupVersion), list())
				if err != nil {
					t.Fatal(err)
				}
				encoded[i] = b
			}
			if string(encoded[0]) != string(encoded[1]) {
				t.Errorf("encoded with the generated conversion:\n%q\nwith Register's:\n%q", encoded[0], encoded[1])
			}
			if len(encoded[0]) < 400 {
				t.Errorf("encoded %d bytes: the list's items are missing", len(encoded[0]))
			}
		})
	}
}

// BenchmarkEncode encodes a 10,000-pod list to v1beta2 protobuf as the API
// server does, with the generated conversion (copy) and with Register's
// (shared). Each iteration fills the list's items afresh from a template,
// as the provider builds each list: encoding caches a quantity's string in
// it, which a list encoded again would reuse where the copy's cache is lost.
func BenchmarkEncode(b *testing.B) {
	template := &custom_metrics.MetricValueList{}
	ts := metav1.Now()
	for i := range 10000 {
		template.Items = append(template.Items, custom_metrics.MetricValue{
			DescribedObject: custom_metrics.ObjectReference{Kind: "Pod", Namespace: "bench", Name: "llm-" + string(rune('a'+i%26)), APIVersion: "v1"},
			Metric:          custom_metrics.MetricIdentifier{Name: "inference_queue_depth"},
			Timestamp:       ts,
			Value:           *resource.NewQuantity(int64(i%17), resource.DecimalSI),
		})
	}
	for _, zeroCopy := range []bool{false, true} {
		name := map[bool]string{false: "copy", true: "shared"}[zeroCopy]
		b.Run(name, func(b *testing.B) {
			s := runtime.NewScheme()
			cminstall.Install(s)
			if zeroCopy {
				if ok, err := Register(s); err != nil || !ok {
					b.Fatalf("Register = %v, %v", ok, err)
				}
			}
			codecs := serializer.NewCodecFactory(s)
			info, _ := runtime.SerializerInfoForMediaType(codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
			enc := codecs.EncoderForVersion(info.Serializer, cmv1beta2.SchemeGroupVersion)
			l := &custom_metrics.MetricValueList{Items: make([]custom_metrics.MetricValue, len(template.Items))}
			b.ReportAllocs()
			for b.Loop() {
				copy(l.Items, template.Items)
				if err := enc.Encode(l, io.Discard); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
