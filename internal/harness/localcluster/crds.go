package localcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/util/wait"
)

// WaitCRDsEstablished waits until every named CustomResourceDefinition
// is Established, or timeout. `kubectl wait --for=condition=Established`
// right after an apply fails at once when a CRD has no status conditions
// yet (it reads a nil list as an error, not as "not yet"), so this polls.
func (c *Cluster) WaitCRDsEstablished(ctx context.Context, timeout time.Duration, names ...string) error {
	pending := map[string]string{}
	for _, name := range names {
		pending[name] = "not read yet"
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		for name := range pending {
			state, err := c.crdEstablished(ctx, name)
			switch {
			case err != nil:
				pending[name] = err.Error()
			case state == "True":
				delete(pending, name)
			default:
				pending[name] = "Established is " + state
			}
		}
		return len(pending) == 0, nil
	})
	if err != nil {
		var why []string
		for name, state := range pending {
			why = append(why, name+": "+state)
		}
		return fmt.Errorf("localcluster: CRDs not established: %w (%s)", err, strings.Join(why, "; "))
	}
	return nil
}

// crdEstablished reads a CRD's Established condition status ("" while it
// has none), through the core client's REST client, which saves a
// dependency on the apiextensions clientset.
func (c *Cluster) crdEstablished(ctx context.Context, name string) (string, error) {
	raw, err := c.client.Discovery().RESTClient().Get().
		AbsPath("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", name).DoRaw(ctx)
	if apierrors.IsNotFound(err) {
		return "absent", nil
	}
	if err != nil {
		return "", err
	}
	var crd struct {
		Status struct {
			Conditions []struct{ Type, Status string } `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &crd); err != nil {
		return "", fmt.Errorf("decode: %w", err)
	}
	for _, cond := range crd.Status.Conditions {
		if cond.Type == "Established" {
			return cond.Status, nil
		}
	}
	return "", nil
}
