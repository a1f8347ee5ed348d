package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpuscale/gpuscale/internal/harness/hostile"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

// The bench's pods are served by child processes of this program, a shard
// of pods each, because a process's open files are bounded: a pod costs a
// listening socket and the server side of the connection the adapter keeps
// to it, and the soak's 18,642 pods (37,284 files) do not fit under this
// machine's hard limit of 20,000, which root cannot raise in a container.
// Split across processes, each holds its shard's files, and the adapter
// holds its kept connections (scrape.DefaultMaxIdleConns at most).

// podServerEnv, set to "1", makes this program a pod server: it reads a
// podServerPlan as JSON from standard input, listens on every pod's
// address, writes podServerReady (or "error: ...") as one line to standard
// output, and serves until its standard input closes, which is when the
// bench ends or dies.
const podServerEnv = "GPUSCALE_BENCH_POD_SERVER"

// podServerReady is the line a pod server writes once every pod listens.
const podServerReady = "ready"

// maxPodsPerServer bounds a pod server's shard: two files a pod and a
// margin stay well under a hard limit of 20,000.
const maxPodsPerServer = 4096

// podServerFiles is the open files a pod server of n pods needs.
func podServerFiles(n int) int { return 2*n + 256 }

// servedPod is one pod a pod server serves.
type servedPod struct {
	// Addr is the pod's IP and metrics port.
	Addr string `json:"addr"`
	// Index is the pod's number in its namespace: a healthy pod's
	// values follow from it (inferencesim.BenchPodHandler).
	Index int `json:"index"`
	// Kind is a hostile kind's name (hostile.Kinds, hostile.TenantKinds),
	// or "" for a healthy bench pod.
	Kind string `json:"kind,omitempty"`
}

// podServerPlan is what a pod server is asked to serve.
type podServerPlan struct {
	// Start is when the bench began: healthy pods' TTFT counts grow from
	// it, the same in every process.
	Start time.Time   `json:"start"`
	Pods  []servedPod `json:"pods"`
}

// runPodServer is a pod server's whole life (see podServerEnv).
func runPodServer(in io.Reader, out io.Writer) error {
	var plan podServerPlan
	dec := json.NewDecoder(in)
	if err := dec.Decode(&plan); err != nil {
		return fmt.Errorf("read the plan: %w", err)
	}
	listeners, err := listenPlan(plan)
	if err != nil {
		fmt.Fprintf(out, "error: %v\n", err)
		return err
	}
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	if _, err := fmt.Fprintln(out, podServerReady); err != nil {
		return err
	}
	// Serve until the bench closes our input (or dies, which closes it).
	_, _ = io.Copy(io.Discard, in)
	return nil
}

// listenPlan listens on every pod's address and serves each its kind.
func listenPlan(plan podServerPlan) ([]net.Listener, error) {
	if err := raiseFileLimit(podServerFiles(len(plan.Pods))); err != nil {
		return nil, err
	}
	kinds, err := kindsFor(plan.Pods)
	if err != nil {
		return nil, err
	}
	var rest []byte
	listeners := make([]net.Listener, 0, len(plan.Pods))
	closeAll := func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}
	for _, p := range plan.Pods {
		l, err := net.Listen("tcp", p.Addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("listen for pod %d at %s: %w", p.Index, p.Addr, err)
		}
		listeners = append(listeners, l)
		if p.Kind != "" {
			go hostile.Serve(l, kinds[p.Kind])
			continue
		}
		if rest == nil {
			if rest, err = inferencesim.BenchPodRest(); err != nil {
				closeAll()
				return nil, err
			}
		}
		// Kept alive, as vLLM's server keeps them; the adapter bounds
		// how many it keeps.
		srv := &http.Server{Handler: inferencesim.BenchPodHandler(p.Index, plan.Start, rest), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { _ = srv.Serve(l) }()
	}
	return listeners, nil
}

// kindsFor builds the hostile kinds pods name, and only those: the first
// round's include a gzip bomb that takes a while to build.
func kindsFor(pods []servedPod) (map[string]hostile.Kind, error) {
	named := map[string]bool{}
	for _, p := range pods {
		if p.Kind != "" {
			named[p.Kind] = true
		}
	}
	kinds := map[string]hostile.Kind{}
	for _, k := range hostile.TenantKinds() {
		kinds[k.Name] = k
	}
	needFirstRound := false
	for name := range named {
		if _, ok := kinds[name]; !ok {
			needFirstRound = true
		}
	}
	if needFirstRound {
		ks, err := firstRound()
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			kinds[k.Name] = k
		}
	}
	for name := range named {
		if _, ok := kinds[name]; !ok {
			return nil, fmt.Errorf("no hostile kind %q", name)
		}
	}
	return kinds, nil
}

// podServer is one running pod server, seen from the bench.
type podServer struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// servePods serves pods from as many pod servers as maxPodsPerServer asks
// for, each a child of this program, and returns once every pod listens.
// Their logs are pod-server-N.log in the output directory.
func (b *bench) servePods(ctx context.Context, pods []servedPod) error {
	return b.servePodsSharded(ctx, pods, maxPodsPerServer)
}

// servePodsSharded is servePods with at most per pods a server.
func (b *bench) servePodsSharded(ctx context.Context, pods []servedPod, per int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	for first := 0; first < len(pods); first += per {
		shard := pods[first:min(len(pods), first+per)]
		log := filepath.Join(b.dir, fmt.Sprintf("pod-server-%d.log", len(b.servers)+1))
		s, err := startPodServer(ctx, self, log, podServerPlan{Start: b.start, Pods: shard})
		if err != nil {
			return err
		}
		b.servers = append(b.servers, s)
	}
	return nil
}

func startPodServer(ctx context.Context, self, logPath string, plan podServerPlan) (*podServer, error) {
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() // the child holds its own descriptor
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), podServerEnv+"=1")
	cmd.Stderr = logFile
	// Killed with the bench even if the bench cannot close its input.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start a pod server: %w", err)
	}
	s := &podServer{cmd: cmd, stdin: stdin}
	if err := json.NewEncoder(stdin).Encode(plan); err != nil {
		s.stop()
		return nil, fmt.Errorf("send a pod server its plan: %w", err)
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case l := <-line:
		if l != podServerReady {
			s.stop()
			if l == "" {
				l = "exited without a word"
			}
			return nil, fmt.Errorf("pod server of %d pods (log %s): %s", len(plan.Pods), logPath, l)
		}
	case <-time.After(2 * time.Minute):
		s.stop()
		return nil, fmt.Errorf("pod server of %d pods (log %s): not listening after 2m", len(plan.Pods), logPath)
	case <-ctx.Done():
		s.stop()
		return nil, ctx.Err()
	}
	return s, nil
}

// stop closes the server's input, which ends it, and waits a while before
// killing it.
func (s *podServer) stop() {
	_ = s.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

// podAddr is where a pod with IP ip serves its metrics.
func podAddr(ip string) string { return net.JoinHostPort(ip, strconv.Itoa(metricsPort)) }
