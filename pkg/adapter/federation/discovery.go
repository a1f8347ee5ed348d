package federation

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	cmprovider "sigs.k8s.io/custom-metrics-apiserver/pkg/provider"
)

// DiscoveryUser is the identity gpuscale's periodic discovery of the
// backend's names is sent as (group system:authenticated): discovery has
// no caller of its own. Kubernetes' default system:discovery ClusterRole
// lets every authenticated user read /apis/*.
const DiscoveryUser = "system:gpuscale-adapter:federation-discovery"

func discoveryContext(ctx context.Context) context.Context {
	return request.WithUser(ctx, &user.DefaultInfo{Name: DiscoveryUser, Groups: []string{user.AllAuthenticated}})
}

// getJSON GETs a discovery document; found is false on a 404, which means
// the backend does not serve that group or version at all.
func (b *Backend) getJSON(ctx context.Context, out any, path ...string) (found bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	ctx, l := b.budget.withLease(ctx)
	defer l.release()
	body, err := b.client.Get().AbsPath(path...).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, b.apiError(ctx, err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return false, fmt.Errorf("metrics backend %s: %s: %w", b.url, strings.Join(path, "/"), err)
	}
	return true, nil
}

// discoverCustom lists the backend's custom metrics and settles which
// version forwarded requests use: v1beta2 when served, else v1beta1. The
// versions are probed, not read from the group's discovery document:
// custom-metrics-apiserver lists only its first version (v1beta1) there,
// though it serves both.
func (b *Backend) discoverCustom(ctx context.Context) ([]cmprovider.CustomMetricInfo, error) {
	var list metav1.APIResourceList
	version := ""
	for _, v := range []string{customV1beta2, customV1beta1} {
		found, err := b.getJSON(ctx, &list, "/apis", customGroup, v)
		if err != nil {
			return nil, err
		}
		if found {
			version = v
			break
		}
	}
	if version == "" {
		return nil, nil // no custom metrics API at all (KEDA's server)
	}
	b.customVersion.Store(version)
	out := make([]cmprovider.CustomMetricInfo, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		// custom-metrics-apiserver names each "<resource>.<group>/<metric>".
		res, metric, ok := strings.Cut(r.Name, "/")
		if !ok || metric == "" {
			continue
		}
		out = append(out, cmprovider.CustomMetricInfo{GroupResource: schema.ParseGroupResource(res), Namespaced: r.Namespaced, Metric: metric})
	}
	return out, nil
}

// discoverExternal lists the backend's external metrics.
func (b *Backend) discoverExternal(ctx context.Context) ([]cmprovider.ExternalMetricInfo, error) {
	var list metav1.APIResourceList
	found, err := b.getJSON(ctx, &list, "/apis", externalGroup, externalVersion)
	if err != nil || !found {
		return nil, err
	}
	out := make([]cmprovider.ExternalMetricInfo, 0, len(list.APIResources))
	for _, r := range list.APIResources {
		if r.Name != "" && !strings.Contains(r.Name, "/") {
			out = append(out, cmprovider.ExternalMetricInfo{Metric: r.Name})
		}
	}
	return out, nil
}

// mergeCustom is own followed by the backend's metrics whose names gpuscale
// does not serve, each listed once.
func mergeCustom(own, backend []cmprovider.CustomMetricInfo, ownNames map[string]bool) []cmprovider.CustomMetricInfo {
	out := slices.Clone(own)
	seen := map[cmprovider.CustomMetricInfo]bool{}
	for _, m := range backend {
		if ownNames[m.Metric] || seen[m] {
			continue
		}
		seen[m] = true
		out = append(out, m)
	}
	return out
}

func mergeExternal(own, backend []cmprovider.ExternalMetricInfo, ownNames map[string]bool) []cmprovider.ExternalMetricInfo {
	out := slices.Clone(own)
	seen := map[string]bool{}
	for _, m := range backend {
		if ownNames[m.Metric] || seen[m.Metric] {
			continue
		}
		seen[m.Metric] = true
		out = append(out, m)
	}
	return out
}
