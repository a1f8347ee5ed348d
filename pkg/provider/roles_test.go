package provider_test

import (
	"context"
	"math"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"

	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/provider"
	"github.com/gpuscale/gpuscale/pkg/signal"
	"github.com/gpuscale/gpuscale/pkg/signal/capacity"
)

func TestExternalRole(t *testing.T) {
	for _, tc := range []struct {
		selector string
		want     provider.Role
	}{
		{"model_name=llama", provider.RoleNone},
		{"model_name=llama,role=prefill", provider.RolePrefill},
		{"model_name=llama,role in (decode)", provider.RoleDecode},
		// Selectors the provider does not serve name no role.
		{"role=decode", provider.RoleNone},
		{"model_name=llama,role in (prefill,decode)", provider.RoleNone},
		{"model_name=llama,role=both", provider.RoleNone},
	} {
		sel, err := labels.Parse(tc.selector)
		if err != nil {
			t.Fatal(err)
		}
		if got := provider.ExternalRole(sel); got != tc.want {
			t.Errorf("ExternalRole(%q) = %q, want %q", tc.selector, got, tc.want)
		}
	}
	if got := provider.ExternalRole(nil); got != provider.RoleNone {
		t.Errorf("ExternalRole(nil) = %q", got)
	}
}

func TestRoleOf(t *testing.T) {
	for _, tc := range []struct {
		labels map[string]string
		want   provider.Role
	}{
		{nil, provider.RoleNone},
		{map[string]string{"gpuscale.io/role": "prefill"}, provider.RolePrefill},
		{map[string]string{"llm-d.ai/role": "decode"}, provider.RoleDecode},
		{map[string]string{"llm-d.ai/role": "prefill"}, provider.RolePrefill},
		// llm-d's "both" serves whole requests.
		{map[string]string{"llm-d.ai/role": "both"}, provider.RoleNone},
		{map[string]string{"nvidia.com/dynamo-sub-component-type": "decode"}, provider.RoleDecode},
		// gpuscale's own label wins over the others, and a value it does
		// not know is no role, not a guess.
		{map[string]string{"gpuscale.io/role": "decode", "llm-d.ai/role": "prefill"}, provider.RoleDecode},
		{map[string]string{"gpuscale.io/role": "Prefill", "llm-d.ai/role": "prefill"}, provider.RoleNone},
		{map[string]string{"app": "vllm"}, provider.RoleNone},
	} {
		if got := provider.RoleOf(tc.labels); got != tc.want {
			t.Errorf("RoleOf(%v) = %q, want %q", tc.labels, got, tc.want)
		}
	}
}

// keyedEstimator records each call's key and pods.
type keyedEstimator struct {
	name  string
	calls []keyedCall
}

type keyedCall struct {
	key  capacity.Key
	pods []capacity.Pod
}

func (e *keyedEstimator) Estimate(k capacity.Key, _ time.Time, pods []capacity.Pod) (capacity.Estimate, error) {
	e.calls = append(e.calls, keyedCall{k, append([]capacity.Pod(nil), pods...)})
	return capacity.Estimate{Utilization: 1.5}, nil
}

// TestCapacityPerRole: a model served by a prefill and a decode
// Deployment gets each pool's signal from the role's estimator, for the
// Deployment (Object, its template's role) and per model and role
// (External, the role's pods only), with what the role's terms read: a
// decode pool without prefill times, a prefill pool without ITL. A model
// asked for without a role is one pool, as before.
func TestCapacityPerRole(t *testing.T) {
	f := newFixture()
	base, prefill, decode := &keyedEstimator{name: "base"}, &keyedEstimator{name: "prefill"}, &keyedEstimator{name: "decode"}
	f.p.SetCapacity(base)
	f.p.SetCapacityByRole(map[provider.Role]provider.CapacityEstimator{provider.RolePrefill: prefill, provider.RoleDecode: decode})
	for _, d := range []struct{ name, roleLabel, role string }{{"llm-prefill", "llm-d.ai/role", "prefill"}, {"llm-decode", "nvidia.com/dynamo-sub-component-type", "decode"}} {
		sel := map[string]string{"app": d.name}
		tmpl := map[string]string{"app": d.name, d.roleLabel: d.role}
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: d.name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl}}}})
		for _, pod := range []string{d.name + "-a", d.name + "-b"} {
			f.addPod("ml", pod, true, tmpl)
			smp := store.Sample{Time: t0.Add(-time.Second), Model: "m", Prefill: hist(3, 1), ITL: hist(40, 2)}
			smp.Set(signal.RequestsRunning, 4)
			smp.Set(signal.QueueDepth, 1)
			smp.Set(signal.KVCacheUtilization, 20)
			f.store.PutPod(store.Key{Namespace: "ml", Name: pod}, signal.SourceInference, smp)
		}
	}
	ctx := context.Background()
	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.CapacityUtilization}
	for _, d := range []struct {
		name string
		est  *keyedEstimator
	}{{"llm-prefill", prefill}, {"llm-decode", decode}} {
		mv, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: d.name}, info, labels.Everything())
		if err != nil {
			t.Fatal(err)
		}
		if milli(t, &mv.Value) != 1.5 || len(d.est.calls) != 1 || d.est.calls[0].key.Target != "deployment/"+d.name || len(d.est.calls[0].pods) != 2 {
			t.Fatalf("%s: value %v, %s estimator calls %+v", d.name, mv.Value.String(), d.est.name, d.est.calls)
		}
	}
	for _, p := range prefill.calls[0].pods {
		if p.Prefill == nil || p.ITL != nil {
			t.Errorf("a prefill pod's inputs: prefill %v, ITL %v; want prefill times and no ITL", p.Prefill, p.ITL)
		}
	}
	for _, p := range decode.calls[0].pods {
		if p.Prefill != nil || p.ITL == nil {
			t.Errorf("a decode pod's inputs: prefill %v, ITL %v; want ITL and no prefill times", p.Prefill, p.ITL)
		}
	}

	sel, _ := labels.Parse(provider.ModelLabel + "=m," + provider.RoleLabel + "=decode")
	ext, err := f.p.GetExternalMetric(ctx, "ml", sel, cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization})
	if err != nil {
		t.Fatal(err)
	}
	if len(ext.Items) != 1 || ext.Items[0].MetricLabels[provider.RoleLabel] != "decode" || ext.Items[0].MetricLabels[provider.ModelLabel] != "m" {
		t.Fatalf("model and role items: %+v", ext.Items)
	}
	last := decode.calls[len(decode.calls)-1]
	if last.key.Target != "model/m/decode" || len(last.pods) != 2 {
		t.Errorf("model and role: key %+v over %d pods, want model/m/decode over the 2 decode pods", last.key, len(last.pods))
	}
	whole, _ := labels.Parse(provider.ModelLabel + "=m")
	if _, err := f.p.GetExternalMetric(ctx, "ml", whole, cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization}); err != nil {
		t.Fatal(err)
	}
	if len(base.calls) != 1 || base.calls[0].key.Target != "model/m" || len(base.calls[0].pods) != 4 {
		t.Errorf("model without a role: %+v, want one pool of the 4 pods", base.calls)
	}
	for _, bad := range []string{provider.ModelLabel + "=m," + provider.RoleLabel + "=both", provider.RoleLabel + "=decode", provider.ModelLabel + "=m,other=x"} {
		s, _ := labels.Parse(bad)
		if _, err := f.p.GetExternalMetric(ctx, "ml", s, cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization}); !apierrors.IsBadRequest(err) {
			t.Errorf("selector %q: %v, want BadRequest", bad, err)
		}
	}
}

// TestRoleCapacityConfig: a prefill pool has no ITL term and a prefill
// term that holds; a decode pool keeps half the tail for slot waits; both
// hold the closed loop open; a pool of whole requests keeps the adapter's
// configuration, its loop included.
func TestRoleCapacityConfig(t *testing.T) {
	base := capacity.DefaultConfig()
	base.ITLObjective = 100 * time.Millisecond
	for _, tc := range []struct {
		role     provider.Role
		itl      time.Duration
		quantile float64
		pool     bool
		loop     [2]float64 // correction bounds
	}{
		{provider.RoleNone, 100 * time.Millisecond, 0.9, false, [2]float64{base.MinCorrection, base.MaxCorrection}},
		{provider.RolePrefill, 0, 0.9, true, [2]float64{1, 1}},
		{provider.RoleDecode, 100 * time.Millisecond, 0.95, false, [2]float64{1, 1}},
	} {
		got := provider.RoleCapacityConfig(base, tc.role)
		if got.ITLObjective != tc.itl || math.Abs(got.Quantile-tc.quantile) > 1e-12 || got.PrefillPool != tc.pool || got.Objective != base.Objective {
			t.Errorf("role %q: ITL %v quantile %v prefill pool %v objective %v; want %v %v %v %v",
				tc.role, got.ITLObjective, got.Quantile, got.PrefillPool, got.Objective, tc.itl, tc.quantile, tc.pool, base.Objective)
		}
		if b := [2]float64{got.MinCorrection, got.MaxCorrection}; b != tc.loop {
			t.Errorf("role %q: correction bounds %v, want %v", tc.role, b, tc.loop)
		}
	}
	if base.MinCorrection == 1 && base.MaxCorrection == 1 {
		t.Fatal("the default configuration holds the loop open: the test cannot tell a role's from it")
	}
}

// prefillPoolEstimator is a keyedEstimator that also takes a prefill pool's
// decode pool (provider.PrefillPoolEstimator), recording it.
type prefillPoolEstimator struct {
	keyedEstimator
	decode [][]capacity.Pod
}

func (e *prefillPoolEstimator) EstimatePrefillPool(k capacity.Key, now time.Time, pods, decode []capacity.Pod) (capacity.Estimate, error) {
	e.decode = append(e.decode, append([]capacity.Pod(nil), decode...))
	return e.Estimate(k, now, pods)
}

// TestPrefillPoolReadsItsDecodePool: a prefill pool's estimate is given the
// TTFT histograms of the decode pods that serve its model, and of no
// others, for its Deployment (the model its pods serve) and per model and
// role; a prefill Deployment whose pods serve two models is given none,
// since nothing tells which decode pool follows it.
func TestPrefillPoolReadsItsDecodePool(t *testing.T) {
	f := newFixture()
	prefill := &prefillPoolEstimator{keyedEstimator: keyedEstimator{name: "prefill"}}
	f.p.SetCapacity(&keyedEstimator{name: "base"})
	f.p.SetCapacityByRole(map[provider.Role]provider.CapacityEstimator{provider.RolePrefill: prefill, provider.RoleDecode: &keyedEstimator{name: "decode"}})
	type pod struct{ name, model string }
	for _, d := range []struct {
		name, role string
		pods       []pod
	}{
		{"m-prefill", "prefill", []pod{{"m-prefill-a", "m"}, {"m-prefill-b", "m"}}},
		{"m-decode", "decode", []pod{{"m-decode-a", "m"}, {"m-decode-b", "m"}, {"m-decode-c", "m"}}},
		{"other-decode", "decode", []pod{{"other-decode-a", "other"}}},
		{"mixed-prefill", "prefill", []pod{{"mixed-prefill-a", "m"}, {"mixed-prefill-b", "other"}}},
	} {
		sel := map[string]string{"app": d.name}
		tmpl := map[string]string{"app": d.name, "llm-d.ai/role": d.role}
		_ = f.deploys.Add(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: d.name},
			Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: sel}, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: tmpl}}}})
		for _, p := range d.pods {
			f.addPod("ml", p.name, true, tmpl)
			smp := store.Sample{Time: t0.Add(-time.Second), Model: p.model, Prefill: hist(3, 1), TTFT: hist(5, 2), ITL: hist(40, 2)}
			smp.Set(signal.RequestsRunning, 4)
			smp.Set(signal.QueueDepth, 1)
			smp.Set(signal.KVCacheUtilization, 20)
			f.store.PutPod(store.Key{Namespace: "ml", Name: p.name}, signal.SourceInference, smp)
		}
	}
	ctx := context.Background()
	info := cmprovider.CustomMetricInfo{GroupResource: schema.GroupResource{Group: "apps", Resource: "deployments"}, Namespaced: true, Metric: provider.CapacityUtilization}
	sel, _ := labels.Parse(provider.ModelLabel + "=m," + provider.RoleLabel + "=prefill")
	for _, tc := range []struct {
		name string
		read func() error
		want int
	}{
		{"the prefill Deployment of model m", func() error {
			_, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "m-prefill"}, info, labels.Everything())
			return err
		}, 3},
		{"model m, role prefill", func() error {
			_, err := f.p.GetExternalMetric(ctx, "ml", sel, cmprovider.ExternalMetricInfo{Metric: provider.CapacityUtilization})
			return err
		}, 3},
		{"a prefill Deployment serving two models", func() error {
			_, err := f.p.GetMetricByName(ctx, types.NamespacedName{Namespace: "ml", Name: "mixed-prefill"}, info, labels.Everything())
			return err
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := len(prefill.decode)
			if err := tc.read(); err != nil {
				t.Fatal(err)
			}
			if len(prefill.decode) != n+1 {
				t.Fatalf("%d EstimatePrefillPool calls, want 1", len(prefill.decode)-n)
			}
			got := prefill.decode[n]
			if len(got) != tc.want {
				t.Fatalf("decode pool of %d pods, want %d", len(got), tc.want)
			}
			for _, p := range got {
				if p.TTFT == nil || p.TTFT.Count != hist(5, 2).Count || !p.Ready {
					t.Errorf("decode pod %+v: want Ready with its TTFT histogram", p)
				}
			}
		})
	}
}

func TestModelLabelValue(t *testing.T) {
	for _, tc := range []struct{ model, want string }{
		{"llama", "llama"},
		{"Llama-3.1-8B_v2", "Llama-3.1-8B_v2"},
		{"meta-llama/Llama-3.1-8B-Instruct", "meta-llama_Llama-3.1-8B-Instruct"},
		{"llama3:8b@q4", "llama3_8b_q4"},
		{"modèle", "mod_le"}, // one '_' a character, not a byte
		{"", ""},
	} {
		got := provider.ModelLabelValue(tc.model)
		if got != tc.want {
			t.Errorf("ModelLabelValue(%q) = %q, want %q", tc.model, got, tc.want)
		}
		if _, err := labels.Parse(provider.ModelLabel + "=" + got); got != "" && err != nil {
			t.Errorf("%q is not a selector's value: %v", got, err)
		}
	}
}
