package certrotation

import (
	"context"
	"encoding/base64"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// APIServices reads and writes the caBundle of APIServices.
type APIServices interface {
	CABundle(ctx context.Context, name string) ([]byte, error)
	SetCABundle(ctx context.Context, name string, pem []byte) error
}

var apiServiceResource = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

// NewAPIServices returns APIServices over a dynamic client (the
// aggregator's typed client is a module of its own).
func NewAPIServices(c dynamic.Interface) APIServices {
	return dynamicAPIServices{c.Resource(apiServiceResource)}
}

type dynamicAPIServices struct {
	r dynamic.NamespaceableResourceInterface
}

func (d dynamicAPIServices) CABundle(ctx context.Context, name string) ([]byte, error) {
	o, err := d.r.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	s, _, err := unstructured.NestedString(o.Object, "spec", "caBundle")
	if err != nil || s == "" {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(s)
}

// SetCABundle patches spec.caBundle and clears insecureSkipTLSVerify,
// which the API refuses beside a caBundle.
func (d dynamicAPIServices) SetCABundle(ctx context.Context, name string, pem []byte) error {
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{
		"caBundle": base64.StdEncoding.EncodeToString(pem), "insecureSkipTLSVerify": false}})
	if err != nil {
		return err
	}
	_, err = d.r.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager})
	return err
}
