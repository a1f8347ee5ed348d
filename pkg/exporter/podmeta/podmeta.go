// Package podmeta keeps, in memory, what the API server says of the pods
// on the exporter's node beyond what the kubelet's pod-resources API does:
// their UIDs and labels, for dcgm-exporter's --kubernetes-enable-pod-uid
// and --kubernetes-enable-pod-labels. It lists the node's pods itself,
// with the pod's service-account token, rather than through client-go,
// which would double the node agent's resident size for one list call.
//
// Pod labels are tenants' data: they are filtered by an allowlist,
// sanitized to Prometheus label names, and bounded in number and length,
// so that no pod can grow the exporter's series without bound.
package podmeta

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// In-cluster defaults, as client-go's rest.InClusterConfig reads them.
const (
	DefaultTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// Bounds on what one pod may add to the exporter's series.
const (
	// MaxLabels is the most labels of one pod served; the first by name.
	MaxLabels = 16
	// MaxValueLength bounds a label value (the API server allows 63).
	MaxValueLength = 256
	// maxListBytes bounds a list of a node's pods: about 100 KiB per
	// hundred pods of usual size; far more is not a node's.
	maxListBytes = 32 << 20
)

// Options configure a Lister.
type Options struct {
	// Server is the API server's URL; from KUBERNETES_SERVICE_HOST and
	// KUBERNETES_SERVICE_PORT when empty.
	Server string
	// TokenFile and CAFile authenticate: the pod's service account's by
	// default. The token is read at every list: projected tokens rotate.
	TokenFile, CAFile string
	// Node is the node whose pods are listed.
	Node string
	// Interval between lists and Timeout of one.
	Interval, Timeout time.Duration
	// Allow, when not empty, keeps only the labels whose name (before
	// sanitizing) one of them matches, as dcgm-exporter's
	// --kubernetes-pod-label-allowlist-regex.
	Allow []*regexp.Regexp
	// Client replaces the HTTP client (tests); its transport must verify
	// the server.
	Client *http.Client
	Logger *slog.Logger
}

// Lister lists the node's pods in the background and answers
// metrics.PodMetadata from memory.
type Lister struct {
	o      Options
	client *http.Client
	log    *slog.Logger
	pods   atomic.Pointer[map[string]metrics.PodMeta]
	errors prometheus.Counter
	lists  prometheus.Counter
}

var _ metrics.PodMetadata = (*Lister)(nil)

// New validates o and returns a Lister; call Run to start listing.
func New(o Options) (*Lister, error) {
	if o.Node == "" {
		return nil, errors.New("podmeta: the node name is required (NODE_NAME)")
	}
	if o.Server == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, errors.New("podmeta: not in a cluster (KUBERNETES_SERVICE_HOST and _PORT unset) and no API server given")
		}
		o.Server = "https://" + net.JoinHostPort(host, port)
	}
	if o.TokenFile == "" {
		o.TokenFile = DefaultTokenFile
	}
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	client := o.Client
	if client == nil {
		if o.CAFile == "" {
			o.CAFile = DefaultCAFile
		}
		pem, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, fmt.Errorf("podmeta: read the API server's CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("podmeta: %s holds no certificate", o.CAFile)
		}
		client = &http.Client{Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
			Proxy:           nil,
		}}
	}
	l := &Lister{o: o, client: client, log: o.Logger,
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_exporter_pod_metadata_errors_total",
			Help: "Failed lists of the node's pods from the API server (--kubernetes-enable-pod-labels, --kubernetes-enable-pod-uid); the previous list stays in use.",
		}),
		lists: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gpuscale_exporter_pod_metadata_lists_total",
			Help: "Lists of the node's pods from the API server.",
		}),
	}
	empty := map[string]metrics.PodMeta{}
	l.pods.Store(&empty)
	return l, nil
}

// Collectors are the Lister's own metrics.
func (l *Lister) Collectors() []prometheus.Collector {
	return []prometheus.Collector{l.errors, l.lists}
}

// PodMeta implements metrics.PodMetadata.
func (l *Lister) PodMeta(namespace, pod string) (metrics.PodMeta, bool) {
	m, ok := (*l.pods.Load())[namespace+"/"+pod]
	return m, ok
}

// Run lists now and every interval until ctx ends.
func (l *Lister) Run(ctx context.Context) {
	t := time.NewTicker(l.o.Interval)
	defer t.Stop()
	for {
		if err := l.List(ctx); err != nil && ctx.Err() == nil {
			l.errors.Inc()
			l.log.Warn("listing the node's pods failed; keeping the previous list", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// podList is the part of a PodList read.
type podList struct {
	Items []struct {
		Metadata struct {
			Name      string            `json:"name"`
			Namespace string            `json:"namespace"`
			UID       string            `json:"uid"`
			Labels    map[string]string `json:"labels"`
		} `json:"metadata"`
	} `json:"items"`
}

// List lists the node's pods once and replaces the metadata.
func (l *Lister) List(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, l.o.Timeout)
	defer cancel()
	q := url.Values{"fieldSelector": {"spec.nodeName=" + l.o.Node}, "resourceVersion": {"0"}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(l.o.Server, "/")+"/api/v1/pods?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("podmeta: %w", err)
	}
	token, err := os.ReadFile(l.o.TokenFile)
	if err != nil {
		return fmt.Errorf("podmeta: read the service account token: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
	req.Header.Set("Accept", "application/json")
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("podmeta: list pods: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("podmeta: list pods: %s", resp.Status)
	}
	var list podList
	body := io.LimitReader(resp.Body, maxListBytes+1)
	if err := json.NewDecoder(body).Decode(&list); err != nil {
		return fmt.Errorf("podmeta: decode the pod list: %w", err)
	}
	pods := make(map[string]metrics.PodMeta, len(list.Items))
	for _, it := range list.Items {
		md := it.Metadata
		pods[md.Namespace+"/"+md.Name] = metrics.PodMeta{UID: md.UID, Labels: l.labels(md.Labels)}
	}
	l.pods.Store(&pods)
	l.lists.Inc()
	return nil
}

// labels returns a pod's labels as the exporter serves them: allowed,
// sanitized, the first MaxLabels by name, values bounded.
func (l *Lister) labels(in map[string]string) []metrics.Label {
	keys := make([]string, 0, len(in))
	for k := range in {
		if l.allowed(k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	out := make([]metrics.Label, 0, min(len(keys), MaxLabels))
	for _, k := range keys {
		if len(out) == MaxLabels {
			break
		}
		name := SanitizeLabelName(k)
		if slices.ContainsFunc(out, func(x metrics.Label) bool { return x.Name == name }) {
			continue // two keys that sanitize alike: the first wins
		}
		v := in[k]
		if len(v) > MaxValueLength {
			v = v[:MaxValueLength]
		}
		out = append(out, metrics.Label{Name: name, Value: v})
	}
	slices.SortFunc(out, func(a, b metrics.Label) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (l *Lister) allowed(k string) bool {
	if len(l.o.Allow) == 0 {
		return true
	}
	for _, re := range l.o.Allow {
		if re.MatchString(k) {
			return true
		}
	}
	return false
}

// SanitizeLabelName turns a Kubernetes label key into a Prometheus label
// name as dcgm-exporter does: every character outside [a-zA-Z0-9_]
// becomes "_", and a leading digit gets a "_" before it.
func SanitizeLabelName(k string) string {
	b := []byte(k)
	for i, c := range b {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '_'
		}
	}
	if len(b) > 0 && b[0] >= '0' && b[0] <= '9' {
		return "_" + string(b)
	}
	return string(b)
}
