// Command benchtargets serves, for BenchmarkCycleScrapes, n simulated vLLM
// servers on their own loopback addresses (127.B.x.y:port), each with a
// loaded vLLM's whole exposition: the gauges and TTFT histogram the adapter
// reads, values distinct per server, and the rest of what a vLLM exposes.
// It runs apart from the benchmark so that the benchmark's CPU time is the
// scraper's alone. It prints "ready" once every server listens and serves
// until its standard input closes.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/gpuscale/gpuscale/pkg/inferencesim"
)

func main() {
	n := flag.Int("n", 2000, "servers")
	base := flag.Int("net", 3, "the B of 127.B.x.y")
	port := flag.Int("port", 8000, "port of every server")
	flag.Parse()
	if err := run(*n, *base, *port); err != nil {
		fmt.Fprintln(os.Stderr, "benchtargets:", err)
		os.Exit(1)
	}
}

func run(n, base, port int) error {
	rest, err := inferencesim.BenchPodRest()
	if err != nil {
		return err
	}
	start := time.Now()
	for i := range n {
		addr := net.JoinHostPort(Addr(base, i), strconv.Itoa(port))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: inferencesim.BenchPodHandler(i, start, rest), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute}
		go func() { _ = srv.Serve(l) }()
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	return nil
}

// Addr is server i's address.
func Addr(base, i int) string {
	return fmt.Sprintf("127.%d.%d.%d", base, 1+i/250, 1+i%250)
}
