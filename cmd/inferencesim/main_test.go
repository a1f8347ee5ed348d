package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestServesOneIndependentServerPerAddress(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan []net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"--listen=127.0.0.1:0", "--listen", "127.0.0.1:0,127.0.0.1:0",
			"--dialect=triton", "--model=llama", "--rate=3", "--log.level=error"}, io.Discard, io.Discard,
			func(a []net.Addr) { addrc <- a })
	}()
	var addrs []net.Addr
	select {
	case addrs = <-addrc:
	case err := <-done:
		t.Fatalf("run returned early: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("servers did not start")
	}
	if len(addrs) != 3 {
		t.Fatalf("%d servers, want 3", len(addrs))
	}
	for _, a := range addrs {
		body := get(t, "http://"+a.String()+"/metrics")
		if !strings.Contains(body, `nv_inference_pending_request_count{model="llama",version="1"}`) {
			t.Errorf("%s/metrics lacks the Triton queue gauge:\n%s", a, body)
		}
		if !strings.Contains(body, `gpuscale_build_info{`) {
			t.Errorf("%s/metrics lacks gpuscale_build_info:\n%s", a, body)
		}
	}
	// Each address has its own server: a rate change on one leaves the
	// others alone.
	req, _ := http.NewRequest(http.MethodPut, "http://"+addrs[0].String()+"/api/v1/load", strings.NewReader(`{"rate": 7}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("PUT rate: %v %v", resp, err)
	}
	resp.Body.Close()
	if !strings.Contains(get(t, "http://"+addrs[0].String()+"/api/v1/load"), `"rate":7`) ||
		!strings.Contains(get(t, "http://"+addrs[1].String()+"/api/v1/load"), `"rate":3`) {
		t.Errorf("rate change leaked between servers")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run after cancel: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("run did not shut down")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %v", url, resp.StatusCode, err)
	}
	return string(b)
}

func TestRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--dialect=ollama"},
		{"--rate=-1"},
		{"--context-tokens=0"},
		{"--listen=127.0.0.1:8000,"},
		{"--listen=127.0.0.1:8000", "--listen=127.0.0.1:8000"},
		{"--log.level=loud"},
		{"--bogus"},
		{"extra"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard, nil)
		if !errors.Is(err, errUsage) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
}

func TestVersionPrintsAndExits(t *testing.T) {
	var out strings.Builder
	// No --listen: a run that went on to serve would bind 127.0.0.1:8000.
	if err := run(context.Background(), []string{"--version"}, &out, io.Discard, nil); err != nil {
		t.Fatalf("run --version: %v", err)
	}
	if !strings.HasPrefix(out.String(), "inferencesim, version ") {
		t.Errorf("--version printed %q", out.String())
	}
}
