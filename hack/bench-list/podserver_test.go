package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/testenv"
)

// TestMain lets the test binary be a pod server, as bench-list's binary
// is: servePods starts children of os.Executable().
func TestMain(m *testing.M) {
	if os.Getenv(podServerEnv) == "1" {
		if err := runPodServer(os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestPodServers(t *testing.T) {
	ports, err := testenv.FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	b := &bench{dir: t.TempDir(), start: time.Now()}
	t.Cleanup(b.close)
	pods := []servedPod{
		{Addr: addr(0), Index: 0},
		{Addr: addr(1), Index: 7},
		{Addr: addr(2), Index: 0, Kind: "names-kept"},
	}
	ctx := context.Background()
	// A shard bound of 2 gives two pod servers: the split is exercised.
	if err := b.servePodsSharded(ctx, pods, 2); err != nil {
		t.Fatal(err)
	}
	if len(b.servers) != 2 {
		t.Fatalf("%d pod servers for 3 pods at 2 a server, want 2", len(b.servers))
	}
	for _, tc := range []struct {
		name, addr, want string
	}{
		// inferencesim.BenchPodHandler: num_requests_waiting is index % 9.
		{"healthy pod 0", addr(0), `vllm:num_requests_waiting{model_name="llama"} 0` + "\n"},
		{"healthy pod 7", addr(1), `vllm:num_requests_waiting{model_name="llama"} 7` + "\n"},
		{"a hostile kind, by name", addr(2), "vllm:num_requests_waiting{model_name="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := get(t, "http://"+tc.addr+"/metrics")
			if !strings.Contains(body, tc.want) {
				t.Fatalf("the answer has no %q:\n%.500s", tc.want, body)
			}
		})
	}
	b.close()
	// Closing the bench ends its pod servers: nothing listens any more.
	for i := range pods {
		if resp, err := http.Get("http://" + addr(i) + "/metrics"); err == nil {
			resp.Body.Close()
			t.Errorf("pod %d still answers after close", i)
		}
	}
}

func TestPodServerRefusesUnknownKind(t *testing.T) {
	ports, err := testenv.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	b := &bench{dir: t.TempDir(), start: time.Now()}
	t.Cleanup(b.close)
	err = b.servePods(context.Background(), []servedPod{{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), Kind: "no-such-kind"}})
	if err == nil || !strings.Contains(err.Error(), `no hostile kind "no-such-kind"`) {
		t.Fatalf("servePods = %v, want the pod server's refusal of the unknown kind", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	return string(body)
}
