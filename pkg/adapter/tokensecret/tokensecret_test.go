package tokensecret_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/gpuscale/gpuscale/pkg/adapter/tokensecret"
)

const (
	ns   = "gpuscale"
	name = "gpuscale-exporter-token"
)

var labels = map[string]string{"app.kubernetes.io/managed-by": "gpuscale-adapter"}

func secret(token string) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string][]byte{tokensecret.Key: []byte(token)}}
}

func newKeeper(t *testing.T, client *fake.Clientset, clk *clocktesting.FakeClock) *tokensecret.Keeper {
	t.Helper()
	cfg := tokensecret.Config{Client: client, Namespace: ns, Name: name, MinLength: 16, Labels: labels, Metric: "test_token_secret"}
	if clk != nil {
		cfg.Clock = clk
	}
	k, err := tokensecret.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func get(t *testing.T, client *fake.Clientset) *corev1.Secret {
	t.Helper()
	s, err := client.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// writes are the client's actions that changed or removed a Secret.
func writes(client *fake.Clientset) []string {
	var out []string
	for _, a := range client.Actions() {
		if v := a.GetVerb(); v == "update" || v == "patch" || v == "delete" {
			out = append(out, v)
		}
	}
	return out
}

func counted(k *tokensecret.Keeper, reason string) float64 {
	return testutil.ToFloat64(k.Collectors()[1].(*prometheus.CounterVec).WithLabelValues(reason))
}

func ready(k *tokensecret.Keeper) float64 { return testutil.ToFloat64(k.Collectors()[0]) }

func errorsCounted(t *testing.T, k *tokensecret.Keeper, get, create, unusable float64) {
	t.Helper()
	for reason, want := range map[string]float64{tokensecret.ReasonGet: get, tokensecret.ReasonCreate: create, tokensecret.ReasonUnusable: unusable} {
		if got := counted(k, reason); got != want {
			t.Errorf("test_token_secret_errors_total{reason=%q} %v, want %v", reason, got, want)
		}
	}
}

// TestEnsure: the Secret is created with a fresh token when absent, and
// never written when present, whatever it holds.
func TestEnsure(t *testing.T) {
	forbidden := func(verb string) func(*fake.Clientset) {
		return func(c *fake.Clientset) {
			c.PrependReactor(verb, "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
				return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), name, fmt.Errorf("RBAC: %s not allowed", verb))
			})
		}
	}
	for _, tc := range []struct {
		name                  string
		existing              *corev1.Secret
		react                 func(*fake.Clientset)
		wantCreated           bool
		wantErr               string
		wantToken             string // "" with wantCreated: a new one
		get, create, unusable float64
	}{
		{name: "absent: created", wantCreated: true},
		{name: "the user's: kept", existing: secret("a-token-of-the-users-own"), wantToken: "a-token-of-the-users-own"},
		{name: "without a token: kept, reported", existing: secret(""), wantErr: "without a usable token", unusable: 1},
		{name: "too short: kept, reported", existing: secret("short"), wantErr: "5 characters", wantToken: "short", unusable: 1},
		{name: "get refused", react: forbidden("get"), wantErr: "get Secret", get: 1},
		{name: "create refused", react: forbidden("create"), wantErr: "create Secret", create: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.existing != nil {
				if err := client.Tracker().Add(tc.existing); err != nil {
					t.Fatal(err)
				}
			}
			if tc.react != nil {
				tc.react(client)
			}
			k := newKeeper(t, client, nil)
			created, err := k.Ensure(context.Background())
			if created != tc.wantCreated || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Ensure: created %v, %v; want created %v, error %q", created, err, tc.wantCreated, tc.wantErr)
			}
			if w := writes(client); len(w) > 0 {
				t.Errorf("the Secret was written: %v", w)
			}
			errorsCounted(t, k, tc.get, tc.create, tc.unusable)
			if want := map[bool]float64{true: 1, false: 0}[tc.wantErr == ""]; ready(k) != want {
				t.Errorf("test_token_secret_ready %v, want %v", ready(k), want)
			}
			if tc.react != nil {
				return
			}
			s := get(t, client)
			tok := s.Data[tokensecret.Key]
			if !tc.wantCreated {
				if string(tok) != string(tc.existing.Data[tokensecret.Key]) {
					t.Errorf("token %q, want the existing %q", tok, tc.existing.Data[tokensecret.Key])
				}
				return
			}
			raw, err := base64.RawURLEncoding.DecodeString(string(tok))
			if err != nil || len(raw) < 32 {
				t.Errorf("token %q: %d random bytes (%v), want at least 32", tok, len(raw), err)
			}
			if s.Labels["app.kubernetes.io/managed-by"] != "gpuscale-adapter" || s.Type != corev1.SecretTypeOpaque {
				t.Errorf("created Secret labels %v, type %s", s.Labels, s.Type)
			}
		})
	}
}

// TestEnsureRace: two replicas find no Secret; the one whose create loses
// reads the winner's and keeps it, as pkg/adapter/certrotation's replicas do.
func TestEnsureRace(t *testing.T) {
	client := fake.NewClientset()
	var creates atomic.Int32
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if creates.Add(1) > 1 {
			return false, nil, nil
		}
		if err := client.Tracker().Add(secret("the-other-replicas-token-0123")); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), name)
	})
	k := newKeeper(t, client, nil)
	created, err := k.Ensure(context.Background())
	if err != nil || created {
		t.Fatalf("Ensure after losing the race: created %v, %v; want the winner's Secret", created, err)
	}
	if got := string(get(t, client).Data[tokensecret.Key]); got != "the-other-replicas-token-0123" {
		t.Errorf("token %q, want the winner's", got)
	}
	if w := writes(client); len(w) > 0 {
		t.Errorf("the Secret was written: %v", w)
	}
	errorsCounted(t, k, 0, 0, 0)
}

// TestRun: refused at first (RBAC not yet bound), the Keeper retries with
// backoff and creates the Secret once allowed; a deleted Secret is made
// again at the next resync, with a new token.
func TestRun(t *testing.T) {
	client := fake.NewClientset()
	var allowed atomic.Bool
	client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
		if !allowed.Load() {
			return true, nil, apierrors.NewForbidden(corev1.Resource("secrets"), name, fmt.Errorf("RBAC"))
		}
		return false, nil, nil
	})
	clk := clocktesting.NewFakeClock(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	k := newKeeper(t, client, clk)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); k.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// waiting returns once Run has tried and waits for its next try.
	waiting := func() {
		t.Helper()
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
			return clk.HasWaiters(), nil
		}); err != nil {
			t.Fatal("Run never waited")
		}
	}
	// step moves the clock to Run's next try, d away: not sooner.
	step := func(d time.Duration) {
		t.Helper()
		waiting()
		clk.Step(d - time.Millisecond)
		if !clk.HasWaiters() {
			t.Errorf("at %v: tried again before %v", clk.Now(), d)
		}
		clk.Step(time.Millisecond)
	}
	exists := func(what string) *corev1.Secret {
		t.Helper()
		var s *corev1.Secret
		if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			s, err = client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			return err == nil, nil
		}); err != nil {
			t.Fatalf("%s: no Secret", what)
		}
		return s
	}
	// Refused three times: tried again after 1s, 2s, 4s.
	for _, d := range []time.Duration{time.Second, 2 * time.Second} {
		step(d)
	}
	waiting()
	if _, err := client.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("a Secret while create is refused: %v", err)
	}
	allowed.Store(true)
	step(4 * time.Second)
	first := exists("once allowed")
	if n := counted(k, tokensecret.ReasonCreate); n != 3 {
		t.Errorf("%v create failures counted, want 3", n)
	}
	if err := client.CoreV1().Secrets(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	step(time.Minute)
	again := exists("after a deletion")
	if string(again.Data[tokensecret.Key]) == string(first.Data[tokensecret.Key]) {
		t.Error("the Secret made again holds the deleted one's token")
	}
}
