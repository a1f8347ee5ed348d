// Command inferencesim serves simulated LLM inference servers (vLLM,
// SGLang, TGI or Triton metrics over a continuous-batching model), one
// independent server per listen address, so that one process can stand in
// for many pods on many loopback addresses.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"

	"github.com/gpuscale/gpuscale/pkg/buildinfo"
	"github.com/gpuscale/gpuscale/pkg/inferencesim"
	"github.com/gpuscale/gpuscale/pkg/logging"
	"github.com/gpuscale/gpuscale/pkg/signal/dialect"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, nil)
	switch {
	case err == nil || errors.Is(err, pflag.ErrHelp):
	case errors.Is(err, errUsage):
		fmt.Fprintf(os.Stderr, "inferencesim: %v\n", err)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "inferencesim: %v\n", err)
		os.Exit(1)
	}
}

// errUsage marks errors in the command line.
var errUsage = errors.New("invalid flags")

// listenList is a flag that may be repeated and holds comma-separated
// addresses.
type listenList []string

func (l *listenList) String() string { return strings.Join(*l, ",") }

// Type names the flag's value in --help.
func (l *listenList) Type() string { return "addresses" }

func (l *listenList) Set(v string) error {
	for a := range strings.SplitSeq(v, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return fmt.Errorf("empty address in %q", v)
		}
		*l = append(*l, a)
	}
	return nil
}

type options struct {
	listen          listenList
	dialect         string
	model           string
	rate            float64
	seed            uint64
	contextTokens   int
	generatedTokens int
	log             *logging.Options
	version         bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{log: logging.New()}
	fs := pflag.NewFlagSet("inferencesim", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Var(&o.listen, "listen", "Address to serve one simulated server on; repeat the flag or separate addresses with commas for several independent servers (default 127.0.0.1:8000).")
	fs.StringVar(&o.dialect, "dialect", string(inferencesim.VLLM), "Metric dialect: "+dialect.Enumerate(func(e *dialect.Engine) string { return string(e.Name) })+".")
	fs.StringVar(&o.model, "model", inferencesim.DefaultModel, "Served model name, as the model label shows it.")
	fs.Float64Var(&o.rate, "rate", 0, "Initial Poisson arrival rate of each server, in requests per second.")
	fs.Uint64Var(&o.seed, "seed", 1, "Seed of the first server's load; the server on the n-th address (from 0) uses seed+n.")
	fs.IntVar(&o.contextTokens, "context-tokens", inferencesim.DefaultRequest.ContextTokens, "Prompt tokens of each generated request.")
	fs.IntVar(&o.generatedTokens, "generated-tokens", inferencesim.DefaultRequest.GeneratedTokens, "Generated tokens of each generated request.")
	o.log.AddFlags(fs)
	fs.BoolVar(&o.version, "version", false, "Print the version and exit.")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", errUsage, err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if len(o.listen) == 0 {
		o.listen = listenList{"127.0.0.1:8000"}
	}
	seen := map[string]bool{}
	for _, a := range o.listen {
		if seen[a] && !strings.HasSuffix(a, ":0") {
			return nil, fmt.Errorf("%w: --listen: %s given twice", errUsage, a)
		}
		seen[a] = true
	}
	return o, nil
}

// run serves until ctx is done, then shuts every server down gracefully.
// ready, if not nil, receives the bound addresses once all listen.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, ready func([]net.Addr)) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	if o.version {
		_, err := fmt.Fprintln(stdout, buildinfo.Print("inferencesim"))
		return err
	}
	log, err := o.log.Setup(stderr)
	if err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	servers, err := newServers(o, log)
	if err != nil {
		return err
	}
	listeners, err := listen(o.listen)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(servers))
	https := make([]*http.Server, len(servers))
	addrs := make([]net.Addr, len(servers))
	for i, s := range servers {
		https[i] = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
		addrs[i] = listeners[i].Addr()
		wg.Go(func() { _ = s.Run(ctx) })
		go func() {
			if err := https[i].Serve(listeners[i]); !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("serve %s: %w", addrs[i], err)
			}
		}()
		log.Info("simulated inference server listening", "address", addrs[i].String(), "dialect", o.dialect, "model", o.model, "rate", o.rate)
	}
	if ready != nil {
		ready(addrs)
	}

	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	for _, h := range https {
		if serr := h.Shutdown(shutdownCtx); serr != nil && err == nil {
			err = fmt.Errorf("graceful shutdown: %w", serr)
		}
	}
	wg.Wait()
	log.Info("stopped", "servers", len(servers))
	return err
}

func newServers(o *options, log *slog.Logger) ([]*inferencesim.Server, error) {
	dialect, err := inferencesim.ParseDialect(o.dialect)
	if err != nil {
		return nil, fmt.Errorf("%w: --dialect: %w", errUsage, err)
	}
	size := inferencesim.Request{ContextTokens: o.contextTokens, GeneratedTokens: o.generatedTokens}
	var servers []*inferencesim.Server
	info := buildinfo.Collector()
	for i, addr := range o.listen {
		s, err := inferencesim.NewServer(inferencesim.Options{
			Dialect: dialect,
			Model:   o.model,
			Seed:    o.seed + uint64(i),
			Rate:    o.rate,
			Sizes:   inferencesim.FixedSizes(size),
			Logger:  log.With("address", addr),
			// Each server has its own registry; one collector serves all.
			Collectors: []prometheus.Collector{info},
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", errUsage, err)
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// listen binds every address before any server starts, so that a bad
// address fails the whole process at once.
func listen(addrs []string) ([]net.Listener, error) {
	var ls []net.Listener
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			for _, open := range ls {
				_ = open.Close()
			}
			return nil, fmt.Errorf("listen on %s: %w", a, err)
		}
		ls = append(ls, l)
	}
	return ls, nil
}
