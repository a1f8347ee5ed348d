package kedascaler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
)

// The scaler port is not behind the kube-apiserver, so it authenticates
// and authorizes its clients itself, as the metrics APIs would have them
// authenticated and authorized there:
//
//   - who: the client certificate the TLS layer verified against the
//     client CA, read as the kube-apiserver reads one (x509 client
//     authentication): the Common Name is the user, each Organization a
//     group. A CA of its own, not the cluster's client CA: its users then
//     exist only here.
//   - may read what: the same read through the metrics APIs, asked of
//     Kubernetes' authorizer (a SubjectAccessReview, through the adapter's
//     delegated authorization and its cache). A model's value is a list of
//     the external metric in the ScaledObject's namespace, a Deployment's
//     or StatefulSet's a get of its custom metric. So a RoleBinding in a
//     tenant's namespace for that tenant's client identity lets it read that
//     namespace, and only that one: a tenant holding its own client key
//     (in a TriggerAuthentication's Secret) reads nothing of another's.
//
// docs/keda.md gives the setup.

// Authorizer is Kubernetes' authorizer as the scaler uses it: the adapter's
// delegated one (SubjectAccessReviews, cached) implements it.
type Authorizer interface {
	Authorize(ctx context.Context, a authorizer.Attributes) (authorizer.Decision, string, error)
}

// reauthorizeEvery is how often a stream's client is authorized again, so
// that a RoleBinding removed ends the streams it allowed.
var reauthorizeEvery = time.Minute

// identity is the client of an RPC: the subject of its verified client
// certificate.
func identity(ctx context.Context) (user.Info, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil, status.Error(codes.Unauthenticated, "no peer")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, status.Error(codes.Unauthenticated, "a client certificate signed by the scaler's client CA is required")
	}
	leaf := info.State.VerifiedChains[0][0]
	if leaf.Subject.CommonName == "" {
		return nil, status.Error(codes.Unauthenticated, "the client certificate has no Common Name, the user it names")
	}
	return &user.DefaultInfo{Name: leaf.Subject.CommonName, Groups: leaf.Subject.Organization}, nil
}

// attributes are the metrics API read that t's value is.
func (t trigger) attributes(u user.Info) authorizer.AttributesRecord {
	a := authorizer.AttributesRecord{User: u, Namespace: t.namespace, ResourceRequest: true}
	if t.scope == scopeModel {
		// GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/SIGNAL
		a.Verb, a.APIGroup, a.APIVersion, a.Resource = "list", "external.metrics.k8s.io", "v1beta1", t.signal
		return a
	}
	// GET /apis/custom.metrics.k8s.io/v1beta2/namespaces/NS/deployments.apps/NAME/SIGNAL
	a.Verb, a.APIGroup, a.APIVersion = "get", "custom.metrics.k8s.io", "v1beta2"
	a.Resource, a.Subresource, a.Name = t.scope+"s.apps", t.signal, t.name
	return a
}

// authorize lets the RPC read t's value only if its client may read it
// through the metrics APIs. With no authorizer (Config.AllowAllNamespaces)
// every client the TLS layer admitted may read every namespace.
func (s *Scaler) authorize(ctx context.Context, t trigger) error {
	if s.authz == nil {
		return nil
	}
	u, err := identity(ctx)
	if err != nil {
		return err
	}
	a := t.attributes(u)
	decision, reason, err := s.authz.Authorize(ctx, a)
	switch {
	case decision == authorizer.DecisionAllow:
		return nil
	case err != nil:
		return status.Errorf(codes.Unavailable, "authorizing %s: %v", quote(u.GetName()), err)
	}
	s.log.Info("KEDA scaler: read refused", "user", u.GetName(), "groups", u.GetGroups(), "namespace", t.namespace,
		"verb", a.Verb, "group", a.APIGroup, "resource", a.Resource, "subresource", a.Subresource, "name", a.Name, "reason", reason)
	return status.Errorf(codes.PermissionDenied, "user %s may not %s %s in namespace %s%s", quote(u.GetName()), a.Verb, what(a), t.namespace, because(reason))
}

// what names the read as its path under the API group would.
func what(a authorizer.AttributesRecord) string {
	if a.Subresource != "" {
		return fmt.Sprintf("%s %s/%s/%s", a.APIGroup, a.Resource, a.Name, a.Subresource)
	}
	return a.APIGroup + " " + a.Resource
}

func because(reason string) string {
	if reason == "" {
		return ""
	}
	return ": " + quote(reason)
}

// errNoAuthorization: a scaler that would serve every namespace to every
// client must be asked for.
var errNoAuthorization = errors.New("no authorizer: set one, or allow every client every namespace explicitly")

func (c Config) checkAuthorization() error {
	switch {
	case c.Authorizer == nil && !c.AllowAllNamespaces:
		return errNoAuthorization
	case c.Authorizer != nil && c.AllowAllNamespaces:
		return errors.New("an authorizer and allowing every namespace exclude each other")
	case c.Authorizer != nil && c.TLS.NoClientAuth:
		return fmt.Errorf("authorizing clients needs their certificates: client authentication is off")
	}
	return nil
}
