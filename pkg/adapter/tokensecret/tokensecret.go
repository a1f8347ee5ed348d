// Package tokensecret keeps a random bearer token in a Secret that several
// replicas share without a leader, the way pkg/adapter/certrotation keeps its
// certificates: what to do is decided from the Secret as read, the write
// is a create that fails if another replica created the Secret first, and
// the loser reads again and finds the work done. Unlike a certificate, a
// token is never renewed: a Secret that exists is never written, so that a
// token of the user's stays theirs, and the Keeper only creates the Secret
// again if it is deleted.
//
// The Keeper needs get on the Secret and create on Secrets of its
// namespace (RBAC cannot limit create by name); it never lists, watches,
// updates or deletes.
package tokensecret

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
)

// Key is the Secret's key holding the token.
const Key = "token"

// TokenBytes is how many random bytes a token is made of (base64url, 43
// characters).
const TokenBytes = 32

// Config configures a Keeper.
type Config struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// MinLength is the shortest token of an existing Secret that is
	// usable (one a user made, say); a shorter one is reported, never
	// replaced.
	MinLength int
	// Labels are set on the Secret the Keeper creates.
	Labels map[string]string
	// Resync is how often the Secret is checked once it is there, so that
	// a deleted one is made again (default 1m).
	Resync time.Duration
	// Metric names the Keeper's series: <Metric>_ready and
	// <Metric>_errors_total.
	Metric string
	Clock  clock.Clock
	Logger *slog.Logger
}

// Reasons Ensure fails, the errors counter's label values.
const (
	ReasonGet      = "get"
	ReasonCreate   = "create"
	ReasonUnusable = "unusable"
)

// Keeper keeps the Secret; see the package documentation.
type Keeper struct {
	cfg    Config
	log    *slog.Logger
	ready  prometheus.Gauge
	errors *prometheus.CounterVec
}

// New checks cfg.
func New(cfg Config) (*Keeper, error) {
	if cfg.Client == nil || cfg.Namespace == "" || cfg.Name == "" || cfg.Metric == "" {
		return nil, errors.New("tokensecret: Client, Namespace, Name and Metric are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	k := &Keeper{cfg: cfg, log: cfg.Logger.With("secret", cfg.Namespace+"/"+cfg.Name),
		ready: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: cfg.Metric + "_ready",
			Help: fmt.Sprintf("1 when the last check found the Secret %s/%s holding a usable token, or made it; else 0.", cfg.Namespace, cfg.Name),
		}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: cfg.Metric + "_errors_total",
			Help: fmt.Sprintf("Failures to make sure the Secret %s/%s holds a token: get or create (an API error, RBAC), unusable (it exists without a token of %d characters or more under %q, and is left as it is).", cfg.Namespace, cfg.Name, max(cfg.MinLength, 1), Key),
		}, []string{"reason"}),
	}
	for _, r := range []string{ReasonGet, ReasonCreate, ReasonUnusable} {
		k.errors.WithLabelValues(r)
	}
	return k, nil
}

// Collectors are the Keeper's metrics.
func (k *Keeper) Collectors() []prometheus.Collector {
	return []prometheus.Collector{k.ready, k.errors}
}

// Ensure makes sure the Secret exists, creating it with a new token if it
// does not; created says whether this call did. An existing Secret is not
// written, even one without a usable token, which is an error.
func (k *Keeper) Ensure(ctx context.Context) (created bool, err error) {
	created, err = k.ensure(ctx)
	k.ready.Set(map[bool]float64{true: 1, false: 0}[err == nil])
	return created, err
}

func (k *Keeper) ensure(ctx context.Context) (created bool, err error) {
	secrets := k.cfg.Client.CoreV1().Secrets(k.cfg.Namespace)
	for attempt := 0; ; attempt++ {
		cur, err := secrets.Get(ctx, k.cfg.Name, metav1.GetOptions{})
		switch {
		case err == nil:
			return false, k.usable(cur)
		case !apierrors.IsNotFound(err):
			k.errors.WithLabelValues(ReasonGet).Inc()
			return false, fmt.Errorf("get Secret %s/%s: %w", k.cfg.Namespace, k.cfg.Name, err)
		}
		tok, err := newToken()
		if err != nil {
			return false, err
		}
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: k.cfg.Name, Namespace: k.cfg.Namespace, Labels: k.cfg.Labels},
			Type: corev1.SecretTypeOpaque, Data: map[string][]byte{Key: tok}}
		_, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: fieldManager})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsAlreadyExists(err) && attempt < 3:
			continue // another replica created it first: read what it wrote
		default:
			k.errors.WithLabelValues(ReasonCreate).Inc()
			return false, fmt.Errorf("create Secret %s/%s: %w", k.cfg.Namespace, k.cfg.Name, err)
		}
	}
}

const fieldManager = "gpuscale-tokensecret"

func (k *Keeper) usable(s *corev1.Secret) error {
	if n := len(bytes.TrimSpace(s.Data[Key])); n < max(k.cfg.MinLength, 1) {
		k.errors.WithLabelValues(ReasonUnusable).Inc()
		return fmt.Errorf("the Secret %s/%s exists without a usable token under %q (%d characters, want at least %d); it is left as it is",
			k.cfg.Namespace, k.cfg.Name, Key, n, max(k.cfg.MinLength, 1))
	}
	return nil
}

// newToken is TokenBytes from crypto/rand, base64url-encoded.
func newToken() ([]byte, error) {
	b := make([]byte, TokenBytes)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("token: %w", err)
	}
	return []byte(base64.RawURLEncoding.EncodeToString(b)), nil
}

// Run ensures the Secret every Resync until ctx is done, retrying a
// failure with backoff (1s doubling to 30s, as pkg/adapter/certrotation does).
// Each change of outcome is logged once.
func (k *Keeper) Run(ctx context.Context) {
	const first, most = time.Second, 30 * time.Second
	backoff := first
	var last string
	for {
		wait := k.cfg.Resync
		created, err := k.Ensure(ctx)
		switch {
		case err != nil:
			if msg := err.Error(); msg != last {
				k.log.Error("token Secret: retrying with backoff", "err", err, "in", backoff)
				last = msg
			}
			wait, backoff = backoff, min(2*backoff, most)
		case created:
			k.log.Info("token Secret created")
			last, backoff = "ok", first
		default:
			if last != "ok" {
				k.log.Info("token Secret present")
				last = "ok"
			}
			backoff = first
		}
		select {
		case <-ctx.Done():
			return
		case <-k.cfg.Clock.After(wait):
		}
	}
}
