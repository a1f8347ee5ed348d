package federation

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/metrics/pkg/apis/custom_metrics"
	cminstall "k8s.io/metrics/pkg/apis/custom_metrics/install"
	"k8s.io/metrics/pkg/apis/external_metrics"
	eminstall "k8s.io/metrics/pkg/apis/external_metrics/install"
)

// Groups and versions of the metrics APIs.
const (
	customGroup       = "custom.metrics.k8s.io"
	externalGroup     = "external.metrics.k8s.io"
	externalVersion   = "v1beta1"
	customV1beta2     = "v1beta2"
	customV1beta1     = "v1beta1"
	defaultBackendTTL = 5 * time.Second
)

// scheme knows both metrics APIs in every version a backend may answer
// with, and converts them to the internal types the provider returns.
var (
	scheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
		cminstall.Install(s)
		eminstall.Install(s)
		return s
	}()
	codecs          = serializer.NewCodecFactory(scheme)
	internalDecoder = codecs.UniversalDecoder() // no versions: to the internal types
)

// BackendConfig says where to forward and how to authenticate.
type BackendConfig struct {
	// URL is the backend's base URL, https://NAME.NAMESPACE.svc:PORT:
	// its host is also the name its serving certificate is verified for.
	URL string
	// CAFile verifies the backend's serving certificate; empty: the
	// system roots. Verification cannot be turned off.
	CAFile string
	// ClientCertFile and ClientKeyFile are the front-proxy client
	// certificate the backend trusts to assert X-Remote-* identities
	// (its --requestheader-client-ca-file and allowed names). They are
	// re-read when they change on disk.
	ClientCertFile, ClientKeyFile string
	// Timeout bounds one forwarded request (default 5s).
	Timeout time.Duration
}

// Backend is another metrics API server, reached as the kube-aggregator
// reaches an APIService: over verified TLS, with a front-proxy client
// certificate, on behalf of the user in each request's context.
type Backend struct {
	client  *rest.RESTClient
	url     string
	timeout time.Duration
	// customVersion is the custom metrics version the backend serves
	// (v1beta2 until discovery says it only has v1beta1).
	customVersion atomic.Value
	// budget bounds the answers all requests hold at once.
	budget *answerBudget
}

// NewBackend builds the client. Nothing is dialled before the first request.
func NewBackend(cfg BackendConfig) (*Backend, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" || (u.Path != "" && u.Path != "/") {
		return nil, fmt.Errorf("forward URL %q: want https://HOST[:PORT] (the backend Service's DNS name)", cfg.URL)
	}
	if (cfg.ClientCertFile == "") != (cfg.ClientKeyFile == "") {
		return nil, errors.New("the forward client certificate and key go together")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = defaultBackendTTL
	}
	rc := &rest.Config{
		Host:    u.Scheme + "://" + u.Host,
		APIPath: "/apis",
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: cfg.CAFile, CertFile: cfg.ClientCertFile, KeyFile: cfg.ClientKeyFile,
		},
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &schema.GroupVersion{Group: customGroup, Version: customV1beta2},
			NegotiatedSerializer: codecs.WithoutConversion(),
			ContentType:          runtime.ContentTypeJSON,
			AcceptContentTypes:   runtime.ContentTypeJSON,
		},
		UserAgent: "gpuscale-adapter/federation",
		// Each forwarded request is an HPA's or a user's; the backend
		// applies its own limits, and a client-side token bucket would
		// turn a burst of HPAs into timeouts.
		QPS: -1,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return &identityRoundTripper{next: &budgetRoundTripper{next: &sizeLimitRoundTripper{next: rt, limit: MaxResponseBytes}}}
		},
	}
	httpClient, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, fmt.Errorf("forward client: %w", err)
	}
	// The caller's identity and the front-proxy certificate are for the
	// backend named by --forward-to, never for wherever its answer points:
	// a redirect is the backend's answer, a 3xx error, not followed.
	httpClient.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	client, err := rest.RESTClientForConfigAndClient(rc, httpClient)
	if err != nil {
		return nil, fmt.Errorf("forward client: %w", err)
	}
	b := &Backend{client: client, url: rc.Host, timeout: cfg.Timeout, budget: newAnswerBudget(MaxInflightAnswerBytes)}
	b.customVersion.Store(customV1beta2)
	return b, nil
}

// MaxResponseBytes bounds one answer of the backend: a metric list for
// 10,000 pods is about 2 MB, and a backend that streams without end must
// not push the adapter past its memory limit. It is also the most of
// MaxInflightAnswerBytes one answer holds.
const MaxResponseBytes = 16 << 20

// errResponseTooLarge is the read error past MaxResponseBytes.
var errResponseTooLarge = fmt.Errorf("the backend's answer exceeds %d bytes", MaxResponseBytes)

// sizeLimitRoundTripper fails the read of a response body past limit
// bytes instead of buffering it whole.
type sizeLimitRoundTripper struct {
	next  http.RoundTripper
	limit int64
}

func (rt *sizeLimitRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := rt.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		return resp, err
	}
	if resp.ContentLength > rt.limit {
		resp.Body.Close()
		return nil, errResponseTooLarge
	}
	resp.Body = &limitedBody{ReadCloser: resp.Body, left: rt.limit}
	return resp, nil
}

// limitedBody reads at most left bytes, then errResponseTooLarge.
type limitedBody struct {
	io.ReadCloser
	left int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One more byte tells a body of exactly the limit from a longer one.
		var one [1]byte
		n, err := b.ReadCloser.Read(one[:])
		if n > 0 {
			return 0, errResponseTooLarge
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	return n, err
}

// errNoUser: a request whose context carries no authenticated user is
// never forwarded, so the backend never sees a request gpuscale did not
// authenticate.
var errNoUser = errors.New("no authenticated user in the request context")

// identityRoundTripper sends the user of the request's context in the
// front-proxy headers (client-go's SetAuthProxyHeaders: X-Remote-User,
// X-Remote-Uid, X-Remote-Group, X-Remote-Extra-*), as the kube-aggregator
// does when it proxies to an APIService.
type identityRoundTripper struct{ next http.RoundTripper }

func (rt *identityRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	u, ok := request.UserFrom(req.Context())
	if !ok || u.GetName() == "" {
		return nil, errNoUser
	}
	req = utilnet.CloneRequest(req)
	transport.SetAuthProxyHeaders(req, u.GetName(), u.GetUID(), u.GetGroups(), u.GetExtra())
	return rt.next.RoundTrip(req)
}

func (rt *identityRoundTripper) WrappedRoundTripper() http.RoundTripper { return rt.next }

// customPath is the backend path of a custom metric, the same one the
// caller asked gpuscale for (custom-metrics-apiserver's routes).
func customPath(version string, gr schema.GroupResource, namespace, name, metric string) []string {
	base := []string{"/apis", customGroup, version}
	if gr.Group == "" && gr.Resource == "namespaces" && namespace == "" {
		return append(base, "namespaces", name, "metrics", metric)
	}
	if namespace != "" {
		base = append(base, "namespaces", namespace)
	}
	return append(base, gr.String(), name, metric)
}

// checkSegments refuses path segments that would make the backend's path
// another than the one asked for: the client joins and cleans segments, so
// ".." would climb and "a/b" would add a level.
func checkSegments(segments ...string) error {
	for _, s := range segments {
		if s == "." || s == ".." || strings.Contains(s, "/") {
			return apierrors.NewBadRequest(fmt.Sprintf("%q cannot be forwarded as a path segment", s))
		}
	}
	return nil
}

// customMetric forwards one custom metrics request; name "*" with a
// selector lists the objects it selects.
func (b *Backend) customMetric(ctx context.Context, gr schema.GroupResource, namespace, name, metric string, selector, metricSelector labels.Selector) (*custom_metrics.MetricValueList, error) {
	if err := checkSegments(gr.String(), namespace, name, metric); err != nil {
		return nil, err
	}
	req := b.client.Get().AbsPath(customPath(b.customVersion.Load().(string), gr, namespace, name, metric)...)
	if selector != nil && !selector.Empty() {
		req = req.Param("labelSelector", selector.String())
	}
	if metricSelector != nil && !metricSelector.Empty() {
		req = req.Param("metricLabelSelector", metricSelector.String())
	}
	var out custom_metrics.MetricValueList
	if err := b.do(ctx, req, &out); err != nil {
		return nil, err
	}
	if err := b.checkNamespaces(gr, namespace, name, out.Items); err != nil {
		return nil, err
	}
	return &out, nil
}

// checkNamespaces refuses an answer that describes objects of another
// namespace than the one asked: the caller may read only that one, and a
// Role may grant just that. The backend's answer is its own to get right,
// but not to widen what a caller reads through gpuscale. An object with no
// namespace is read as being in the one asked (the HPA reads items by
// name). A namespace asked by name (the namespaces resource) is described
// in no namespace or in itself.
func (b *Backend) checkNamespaces(gr schema.GroupResource, namespace, name string, items []custom_metrics.MetricValue) error {
	asked := namespace
	if namespace == "" && gr.Group == "" && gr.Resource == "namespaces" {
		asked = name
	}
	for _, it := range items {
		if ns := it.DescribedObject.Namespace; asked != "" && ns != "" && ns != asked {
			return apierrors.NewInternalError(fmt.Errorf("metrics backend %s answered for an object in namespace %s, asked about %s",
				b.url, quoteLimited(ns), quoteLimited(asked)))
		}
	}
	return nil
}

// checkName refuses an answer for one object that describes another.
func (b *Backend) checkName(name string, it custom_metrics.MetricValue) error {
	if got := it.DescribedObject.Name; got != name {
		return apierrors.NewInternalError(fmt.Errorf("metrics backend %s answered for %s, asked about %s", b.url, quoteLimited(got), quoteLimited(name)))
	}
	return nil
}

// maxEchoed bounds what of the backend's answer an error repeats.
const maxEchoed = 64

// quoteLimited quotes s, cut to maxEchoed bytes.
func quoteLimited(s string) string {
	if len(s) <= maxEchoed {
		return strconv.Quote(s)
	}
	return strconv.Quote(s[:maxEchoed]) + fmt.Sprintf("... (%d bytes)", len(s))
}

// externalMetric forwards one external metrics request.
func (b *Backend) externalMetric(ctx context.Context, namespace, metric string, metricSelector labels.Selector) (*external_metrics.ExternalMetricValueList, error) {
	if err := checkSegments(namespace, metric); err != nil {
		return nil, err
	}
	req := b.client.Get().AbsPath("/apis", externalGroup, externalVersion, "namespaces", namespace, metric)
	if metricSelector != nil && !metricSelector.Empty() {
		req = req.Param("labelSelector", metricSelector.String())
	}
	var out external_metrics.ExternalMetricValueList
	if err := b.do(ctx, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// do sends req within the timeout and decodes the answer, in whichever
// version the backend wrote it, into out's internal type.
func (b *Backend) do(ctx context.Context, req *rest.Request, out runtime.Object) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	// The answer's bytes are charged from its first byte until it is
	// decoded: decoding takes several times what was read.
	ctx, l := b.budget.withLease(ctx)
	defer l.release()
	body, err := req.Do(ctx).Raw()
	if err != nil {
		return b.apiError(ctx, err)
	}
	// An answer that ends as the deadline passes can be a server's empty
	// 200 for a request it saw cancelled: it is a timeout, not a value.
	if ctx.Err() != nil {
		return b.apiError(ctx, ctx.Err())
	}
	// The decoder reads nothing into out from an empty body and calls it
	// success: an empty list served for a backend that said nothing.
	if len(body) == 0 {
		return apierrors.NewInternalError(fmt.Errorf("metrics backend %s: empty answer", b.url))
	}
	obj, _, err := internalDecoder.Decode(body, nil, out)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("metrics backend %s: undecodable answer: %w", b.url, err))
	}
	if obj != out {
		return apierrors.NewInternalError(fmt.Errorf("metrics backend %s answered a %T, want a %T", b.url, obj, out))
	}
	return nil
}

// apiError keeps the backend's own status (NotFound stays NotFound,
// Forbidden stays Forbidden) and turns a failure to reach it into a
// Timeout or ServiceUnavailable naming the backend, never a NotFound.
func (b *Backend) apiError(ctx context.Context, err error) error {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		return err
	case errors.Is(err, errNoUser):
		return apierrors.NewInternalError(fmt.Errorf("not forwarded to %s: %w", b.url, err))
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return apierrors.NewTimeoutError(fmt.Sprintf("metrics backend %s did not answer within %v", b.url, b.timeout), 0)
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf("metrics backend %s: %v", b.url, err))
}

// resultOf classifies a forwarded request's outcome for the counter.
func resultOf(err error) string {
	switch {
	case err == nil:
		return resultOK
	case apierrors.IsNotFound(err):
		return resultNotFound
	case apierrors.IsForbidden(err):
		return resultForbidden
	case apierrors.IsUnauthorized(err):
		return resultUnauthorized
	case apierrors.IsTimeout(err):
		return resultTimeout
	case apierrors.IsServiceUnavailable(err):
		return resultUnavailable
	}
	return resultError
}

// wrongCount: a request for one object answered with another number of
// values is the backend's error, not a value to pick from.
func (b *Backend) wrongCount(n int) error {
	return apierrors.NewInternalError(fmt.Errorf("metrics backend %s answered %d values for one object", b.url, n))
}
