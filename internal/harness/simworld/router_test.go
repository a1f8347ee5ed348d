package simworld

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gpuscale/gpuscale/pkg/adapter/inference"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// scrapeRouter reads what a router holds per model the way the adapter
// does: its /metrics through the router dialects.
func scrapeRouter(addr string) (map[string]float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	sig, err := inference.DetectRouter(fams)
	if err != nil {
		return nil, err
	}
	if sig.Dialect != inference.EPP {
		return nil, fmt.Errorf("dialect %s, want %s", sig.Dialect, inference.EPP)
	}
	return sig.Held, nil
}

// TestRouterHoldsUntilReady: requests sent to the router while its model
// has no ready replica are held, shown in the endpoint picker's queue
// gauge by model, and all forwarded, none refused, once a replica is
// ready; each gets its first token.
func TestRouterHoldsUntilReady(t *testing.T) {
	routerIP := podIP(8, 1)
	tw := startWorld(t, node("n8", 8),
		pod("llm", "epp", "n8", routerIP, RouterImage, withEnv("SIM_ROUTE_SELECTOR", "app=chat"), withEnv("SIM_MODEL", "llama")),
		pod("llm", "server", "n8", podIP(8, 2), InferenceImage, withLabels("app", "chat"), withEnv("SIM_MODEL", "llama")),
	)
	tw.setReady(t, "llm", "server", false)
	var r *Router
	eventually(t, 10*time.Second, "router and server up", func() error {
		if r = tw.Router("llm", "epp"); r == nil || tw.Server("llm", "server") == nil {
			return errors.New("not yet")
		}
		return nil
	})
	addr := routerIP + ":9090"
	if held, err := scrapeRouter(addr); err != nil || held["llama"] != 0 || len(held) != 1 {
		t.Fatalf("idle router: %v, %v; want llama 0", held, err)
	}
	eventually(t, 5*time.Second, "the server out of the backends", func() error {
		if _, err := tw.Send("llm", labels.SelectorFromSet(labels.Set{"app": "chat"}), inferencesim.DefaultRequest, nil); !errors.Is(err, ErrNoBackend) {
			return fmt.Errorf("send: %v", err)
		}
		return nil
	})

	var log ttftLog
	for range 5 {
		if err := r.Send(inferencesim.Request{ContextTokens: 200, GeneratedTokens: 4}, log.record); err != nil {
			t.Fatal(err)
		}
	}
	if s := r.Stats(); s.Held != 5 || s.Buffered != 5 || s.Forwarded != 0 {
		t.Fatalf("with no ready backend: %+v", s)
	}
	if held, err := scrapeRouter(addr); err != nil || held["llama"] != 5 {
		t.Fatalf("scraped %v, %v; want llama 5", held, err)
	}

	tw.setReady(t, "llm", "server", true)
	eventually(t, 10*time.Second, "every held request forwarded and answered", func() error {
		s := r.Stats()
		if s.Held != 0 || s.Forwarded != 5 || s.FirstTokens != 5 || len(log.snapshot()) != 5 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	if s := r.Stats(); s.Errors != 0 || s.Received != 5 {
		t.Fatalf("after the wake: %+v", s)
	}
	if held, err := scrapeRouter(addr); err != nil || held["llama"] != 0 {
		t.Fatalf("scraped %v, %v; want llama 0", held, err)
	}
	// With a ready backend, a request goes straight through.
	if err := r.Send(inferencesim.DefaultRequest, nil); err != nil {
		t.Fatal(err)
	}
	if s := r.Stats(); s.Buffered != 5 || s.Forwarded != 6 {
		t.Fatalf("direct send: %+v", s)
	}
}

// TestRouterHoldsTheLoadAtZero: the World's load for a selector with no
// ready pod reaches the router in front of it, which holds it.
func TestRouterHoldsTheLoadAtZero(t *testing.T) {
	tw := startWorld(t, node("n9", 8),
		pod("llm", "epp", "n9", podIP(9, 1), RouterImage, withEnv("SIM_ROUTE_SELECTOR", "app=chat")),
	)
	var r *Router
	eventually(t, 10*time.Second, "router up", func() error {
		if r = tw.Router("llm", "epp"); r == nil {
			return errors.New("not yet")
		}
		return nil
	})
	tw.SetRate("llm", labels.SelectorFromSet(labels.Set{"app": "chat"}), 20)
	eventually(t, 10*time.Second, "arrivals held", func() error {
		if s := r.Stats(); s.Held < 3 || s.Errors != 0 {
			return fmt.Errorf("%+v", s)
		}
		return nil
	})
	tw.SetRate("llm", labels.SelectorFromSet(labels.Set{"app": "chat"}), 0)
	stopped := r.Stats()
	// Three rounds of the router taking in the load, none of which may
	// add a request.
	eventually(t, 10*time.Second, "three router rounds after the load stopped", func() error {
		if s := r.Stats(); s.Polls < stopped.Polls+3 {
			return fmt.Errorf("%d rounds", s.Polls-stopped.Polls)
		}
		return nil
	})
	if s := r.Stats(); s.Held != stopped.Held || s.Received != stopped.Received {
		t.Fatalf("held %d of %d received when the load stopped, then %d of %d", stopped.Held, stopped.Received, s.Held, s.Received)
	}
}

func TestRouterNeedsASelector(t *testing.T) {
	tw := startWorld(t, node("n10", 8), pod("llm", "epp", "n10", podIP(10, 1), RouterImage))
	// Refused at the first start and at the retry.
	tw.logged(t, 2, `msg="cannot start router; will retry" pod=llm/epp err="SIM_ROUTE_SELECTOR: a non-empty label selector is required`)
	if tw.Router("llm", "epp") != nil {
		t.Fatal("a router without SIM_ROUTE_SELECTOR started")
	}
}
