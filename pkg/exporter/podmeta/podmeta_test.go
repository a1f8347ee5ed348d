package podmeta

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuscale/gpuscale/pkg/metrics"
)

type fakeAPI struct {
	srv    *httptest.Server
	status atomic.Int32
	body   atomic.Pointer[string]
	token  string
}

func newFakeAPI(t *testing.T, token string) *fakeAPI {
	t.Helper()
	f := &fakeAPI{token: token}
	f.status.Store(http.StatusOK)
	f.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/pods" || r.URL.Query().Get("fieldSelector") != "spec.nodeName=gpu-1" ||
			r.Header.Get("Authorization") != "Bearer "+f.token {
			http.Error(w, "unexpected request "+r.URL.String(), http.StatusForbidden)
			return
		}
		w.WriteHeader(int(f.status.Load()))
		_, _ = w.Write([]byte(*f.body.Load()))
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeAPI) serve(pods ...map[string]any) {
	items := make([]map[string]any, len(pods))
	for i, p := range pods {
		items[i] = map[string]any{"metadata": p, "spec": map[string]any{"nodeName": "gpu-1"}}
	}
	b, _ := json.Marshal(map[string]any{"kind": "PodList", "items": items})
	s := string(b)
	f.body.Store(&s)
}

func newLister(t *testing.T, f *fakeAPI, allow ...string) *Lister {
	t.Helper()
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(f.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var res []*regexp.Regexp
	for _, a := range allow {
		res = append(res, regexp.MustCompile(a))
	}
	l, err := New(Options{Server: f.srv.URL, TokenFile: tok, Node: "gpu-1", Client: f.srv.Client(), Allow: res})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func TestListPods(t *testing.T) {
	f := newFakeAPI(t, "sa-token")
	many := map[string]any{}
	for i := range 40 {
		many[fmt.Sprintf("k%02d", i)] = "v"
	}
	f.serve(
		map[string]any{"name": "vllm-0", "namespace": "llm", "uid": "uid-1", "labels": map[string]any{
			"app.kubernetes.io/name": "vllm", "team": "a", "9lives": "x", "long": strings.Repeat("x", 1000)}},
		map[string]any{"name": "flood", "namespace": "evil", "uid": "uid-2", "labels": many},
	)
	l := newLister(t, f)
	if err := l.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, ok := l.PodMeta("llm", "vllm-0")
	if !ok || m.UID != "uid-1" {
		t.Fatalf("PodMeta = %+v, %v", m, ok)
	}
	want := []metrics.Label{{Name: "_9lives", Value: "x"}, {Name: "app_kubernetes_io_name", Value: "vllm"},
		{Name: "long", Value: strings.Repeat("x", MaxValueLength)}, {Name: "team", Value: "a"}}
	if fmt.Sprint(m.Labels) != fmt.Sprint(want) {
		t.Errorf("labels = %v, want %v", m.Labels, want)
	}
	if m, _ := l.PodMeta("evil", "flood"); len(m.Labels) != MaxLabels {
		t.Errorf("a pod with 40 labels serves %d, want at most %d", len(m.Labels), MaxLabels)
	}
	if _, ok := l.PodMeta("llm", "gone"); ok {
		t.Error("metadata of an unknown pod")
	}

	// A failing list keeps the previous one.
	f.status.Store(http.StatusInternalServerError)
	if err := l.List(context.Background()); err == nil {
		t.Error("a 500 list succeeded")
	}
	if _, ok := l.PodMeta("llm", "vllm-0"); !ok {
		t.Error("a failed list dropped the pods")
	}
	f.status.Store(http.StatusOK)
	garbage := strings.Repeat("[", 1000)
	f.body.Store(&garbage)
	if err := l.List(context.Background()); err == nil {
		t.Error("a garbage list succeeded")
	}
}

func TestAllowlist(t *testing.T) {
	f := newFakeAPI(t, "t")
	f.serve(map[string]any{"name": "p", "namespace": "n", "uid": "u", "labels": map[string]any{
		"team": "a", "app.kubernetes.io/name": "x", "secret-ish": "y"}})
	l := newLister(t, f, "^team$", "^app\\.kubernetes\\.io/")
	if err := l.List(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, _ := l.PodMeta("n", "p")
	if fmt.Sprint(m.Labels) != fmt.Sprint([]metrics.Label{{Name: "app_kubernetes_io_name", Value: "x"}, {Name: "team", Value: "a"}}) {
		t.Errorf("labels = %v", m.Labels)
	}
}

func TestNewNeedsNode(t *testing.T) {
	if _, err := New(Options{Server: "https://x"}); err == nil {
		t.Error("no node accepted")
	}
}
