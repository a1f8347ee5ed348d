package gather

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpuscale/gpuscale/pkg/adapter/discovery"
	"github.com/gpuscale/gpuscale/pkg/adapter/scrape"
	"github.com/gpuscale/gpuscale/pkg/adapter/store"
	"github.com/gpuscale/gpuscale/pkg/signal"
)

// BenchmarkCycleScrapes is the adapter's scraping as it runs, one gather
// cycle over 2,000 simulated vLLM servers, each on its own loopback
// address with a loaded vLLM's whole exposition (33 KB), served by another
// process (testdata/benchtargets) so that the CPU measured is the
// scraper's alone: discovery, the default scraper (connections, reading,
// selecting and parsing families), ingest and the store. cpu-us/target is
// this process's CPU (user and system, garbage collection included, from
// getrusage) per target scraped; at 10,000 pods every 5 s the adapter
// spends 2,000 times that, in seconds, per second. The histograms parsed
// follow the namespace's reads (--latency-window-idle):
//   - all: every family parsed and every window kept (idle 0, as before
//     the reads decided);
//   - ttft-read: a TTFT quantile read, its family parsed and window kept;
//   - capacity-read: the capacity signal's reads at the default (no ITL
//     objective), TTFT and prefill time parsed, no window kept;
//   - unread: queue depth alone, no histogram parsed.
func BenchmarkCycleScrapes(b *testing.B) {
	const n, netB, port = 2000, 6, 8000
	if err := raiseFileLimit(n + 1024); err != nil {
		b.Fatal(err)
	}
	bin := filepath.Join(b.TempDir(), "benchtargets")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/benchtargets").CombinedOutput(); err != nil {
		b.Fatalf("build benchtargets: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-n", strconv.Itoa(n), "-net", strconv.Itoa(netB), "-port", strconv.Itoa(port))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = stdin.Close(); _ = cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		b.Fatalf("benchtargets: %q, %v", line, err)
	}
	pods := make(podList, n)
	for i := range pods {
		pods[i] = &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: fmt.Sprintf("llm-%05d", i), Annotations: map[string]string{
				discovery.AnnotationScrape: "true", discovery.AnnotationPort: strconv.Itoa(port)}},
			Spec: corev1.PodSpec{NodeName: "node-a"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: fmt.Sprintf("127.%d.%d.%d", netB, 1+i/250, 1+i%250),
				Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	interval := 5 * time.Second
	for _, tc := range []struct {
		name string
		idle time.Duration
		read func(*store.Store)
	}{
		{"all", 0, func(*store.Store) {}},
		{"ttft-read", time.Hour, func(st *store.Store) {
			st.HistIncrease(store.Key{Namespace: "bench", Name: pods[0].Name}, signal.HistTTFT, time.Now(), time.Minute, time.Minute)
		}},
		{"capacity-read", time.Hour, func(st *store.Store) {
			st.ReadHistograms("bench", store.HistogramsTTFT|store.HistogramsPrefill, time.Now())
		}},
		{"unread", time.Hour, func(*store.Store) {}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			st := store.New(14, store.WithTTFTRetention(65*time.Second), store.WithLatencyWindowIdle(tc.idle))
			tc.read(st)
			sc := scrape.New(scrape.Config{CycleTimeout: interval})
			b.Cleanup(sc.CloseIdleConnections) // a socket per target
			g, err := New(Config{Pods: pods, Discovery: discovery.Config{MaxTargetsPerNamespace: n}, Store: st, Interval: interval,
				RetainFor: 4 * interval, Scraper: sc})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for range 2 { // connections, the arenas and the store's windows grow
				g.Cycle(ctx)
			}
			if got, _ := st.Len(); got != n {
				b.Fatalf("%d pods stored, want %d", got, n)
			}
			b.ReportAllocs()
			cpu0 := processCPU(b)
			for b.Loop() {
				g.Cycle(ctx)
			}
			cpu := processCPU(b) - cpu0
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-us/target")
		})
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// raiseFileLimit lifts RLIMIT_NOFILE to at least n: a connection per
// target.
func raiseFileLimit(n int) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= uint64(n) {
		return nil
	}
	lim.Cur = min(max(lim.Cur, uint64(n)), lim.Max)
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
