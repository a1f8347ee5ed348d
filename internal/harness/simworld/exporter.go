package simworld

import (
	"context"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/gpuscale/gpuscale/cmd/exporter/app"
)

// exporterRun is the in-process exporter of one exporter pod.
type exporterRun struct {
	pod    podKey
	node   string
	addr   string
	cancel context.CancelFunc
	done   chan struct{}
	// up is set once the exporter listens.
	up atomic.Bool
}

// exporterConfig is what an exporter pod's exporter is started with.
type exporterConfig struct {
	pod      podKey
	node     string
	addr     string
	socket   string
	gpus     int
	interval time.Duration
}

// startExporter runs the whole exporter, as its container would, with
// simulated GPUs named after the node so that their UUIDs are
// sim.GPUUUID(node, i). A failure to start (address in use) ends the run;
// the next reconcile replaces it.
func startExporter(log *slog.Logger, c exporterConfig) *exporterRun {
	o := app.NewOptions()
	o.Backend = "sim"
	o.SimGPUs = c.gpus
	o.Hostname = c.node
	o.ListenAddress = c.addr
	o.CollectInterval = c.interval
	o.PodResourcesSocket = c.socket
	o.PodResourcesInterval = c.interval
	log = log.With("component", "exporter", "node", c.node, "pod", c.pod.String())

	ctx, cancel := context.WithCancel(context.Background())
	r := &exporterRun{pod: c.pod, node: c.node, addr: c.addr, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		defer r.up.Store(false)
		if err := app.Run(ctx, o, log, func(net.Addr) { r.up.Store(true) }); err != nil {
			log.Warn("exporter stopped", "err", err)
		}
	}()
	return r
}

// exited reports whether the exporter has stopped on its own.
func (r *exporterRun) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// stop shuts the exporter down and waits for it.
func (r *exporterRun) stop() {
	r.cancel()
	<-r.done
}
