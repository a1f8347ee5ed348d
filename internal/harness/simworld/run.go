package simworld

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// Run watches pods (in every namespace) and nodes and keeps the simulated
// servers in step with them until ctx is done, then stops every server it
// started and returns nil. A World runs once.
func (w *World) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.started {
		w.mu.Unlock()
		return errors.New("simworld: Run called twice")
	}
	w.started = true
	w.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	factory := informers.NewSharedInformerFactory(w.opts.Client, 0)
	// Shutdown waits for the informers, which stop only once ctx is done.
	defer factory.Shutdown()
	defer cancel()

	pods, nodes := factory.Core().V1().Pods(), factory.Core().V1().Nodes()
	if err := pods.Informer().AddIndexers(cache.Indexers{nodeIndex: byNode}); err != nil {
		return fmt.Errorf("simworld: index pods by node: %w", err)
	}
	kick := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { w.trigger() },
		UpdateFunc: func(any, any) { w.trigger() },
		DeleteFunc: func(any) { w.trigger() },
	}
	// A pod's deletion is noted before the sync it triggers.
	podKick := kick
	podKick.UpdateFunc = func(old, new any) { w.noteDeletion(old, new); w.trigger() }
	if _, err := pods.Informer().AddEventHandler(podKick); err != nil {
		return fmt.Errorf("simworld: watch: %w", err)
	}
	if _, err := nodes.Informer().AddEventHandler(kick); err != nil {
		return fmt.Errorf("simworld: watch: %w", err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("simworld: %v informer did not sync", typ)
		}
	}

	w.mu.Lock()
	w.pods, w.nodes, w.podIndex = pods.Lister(), nodes.Lister(), pods.Informer().GetIndexer()
	w.mu.Unlock()
	defer w.teardown()
	w.log.Info("simulated world running")
	w.loop(ctx)
	return nil
}

// loop reconciles on every change and, every GPUUpdateInterval, retries
// what failed to start and moves GPU load.
func (w *World) loop(ctx context.Context) {
	t := time.NewTicker(w.opts.GPUUpdateInterval)
	defer t.Stop()
	w.reconcile()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
			w.reconcile()
		case <-t.C:
			w.reconcile()
			w.updateGPUs(ctx)
		}
	}
}

// teardown stops everything the World started.
func (w *World) teardown() {
	w.mu.Lock()
	servers, exporters, sockets, routers := w.servers, w.exporter, w.sockets, w.routers
	w.servers, w.exporter, w.sockets = map[podKey]*inferenceRun{}, map[podKey]*exporterRun{}, map[string]*podResourcesServer{}
	w.routers = map[podKey]*routerRun{}
	w.pods, w.nodes, w.podIndex = nil, nil, nil
	w.mu.Unlock()
	close(w.stopDrains)
	w.draining.Wait()
	for _, r := range servers {
		r.stop()
	}
	for _, r := range exporters {
		r.stop()
	}
	for _, r := range routers {
		r.stop()
	}
	for _, s := range sockets {
		s.stop()
	}
	w.client.CloseIdleConnections()
	w.log.Info("simulated world stopped")
}

// reconcile stops what no longer matches the cluster, then starts what is
// missing. Stopping comes first and outside the lock: a pod IP that kwok
// hands to a new pod must be free before the new server listens, and
// stopping an exporter waits on pod-resources calls that take the lock.
func (w *World) reconcile() {
	w.mu.Lock()
	all, err := w.pods.List(labels.Everything())
	if err != nil {
		w.mu.Unlock()
		w.log.Error("list pods", "err", err) // unreachable: listers do not fail
		return
	}
	byKey := make(map[podKey]*corev1.Pod, len(all))
	for _, p := range all {
		byKey[keyOf(p)] = p
	}
	stopping := w.releaseLocked(byKey)
	w.mu.Unlock()
	stopping()

	w.mu.Lock()
	defer w.mu.Unlock()
	// Sockets first, so that a new exporter's first List finds its node's.
	w.syncNodesLocked(all)
	for _, p := range all {
		w.startLocked(p)
	}
	w.spreadLocked()
}

// releaseLocked removes from the World every server whose pod is gone,
// moved or no longer serving, and returns a function that stops them.
func (w *World) releaseLocked(pods map[podKey]*corev1.Pod) (stop func()) {
	var stops []func()
	for k, r := range w.servers {
		p := pods[k]
		if p != nil && !r.died.Load() && r.node == p.Spec.NodeName && r.addr == w.serverAddr(p) {
			continue
		}
		delete(w.servers, k)
		if !r.died.Load() && (p == nil || p.DeletionTimestamp != nil) {
			w.terminateLocked(k, r, p)
			continue
		}
		stops = append(stops, r.stop)
	}
	for k := range w.deletionGrace {
		if pods[k] == nil { // gone, with no server to terminate
			delete(w.deletionGrace, k)
		}
	}
	for k, r := range w.exporter {
		if p := pods[k]; p == nil || r.exited() || r.node != p.Spec.NodeName || r.addr != w.exporterAddr(p) {
			delete(w.exporter, k)
			stops = append(stops, r.stop)
		}
	}
	for k, r := range w.routers {
		if p := pods[k]; p == nil || r.addr != w.routerAddr(p) {
			delete(w.routers, k)
			stops = append(stops, r.stop)
		}
	}
	for k := range w.muted {
		if pods[k.pod] == nil {
			delete(w.muted, k)
		}
	}
	nodes, err := w.nodes.List(labels.Everything())
	if err != nil {
		w.log.Error("list nodes", "err", err) // unreachable: listers do not fail
	}
	known := make(map[string]bool, len(nodes))
	for _, n := range nodes {
		known[n.Name] = true
	}
	for name, s := range w.sockets {
		if !known[name] {
			delete(w.sockets, name)
			stops = append(stops, s.stop)
		}
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// startLocked starts the servers p should have and lacks. Failures are
// logged and retried on the next reconcile.
func (w *World) startLocked(p *corev1.Pod) {
	k := keyOf(p)
	if addr := w.serverAddr(p); addr != "" && w.servers[k] == nil && !w.muted[muteKey{k, InferenceImage}] {
		c := simContainer(p, InferenceImage)
		r, err := startInference(w.log, w.opts.Now, k, p.Spec.NodeName, c, addr)
		if err != nil {
			w.log.Warn("cannot start inference server; will retry", "pod", k.String(), "err", err)
		} else {
			r.term, r.gpus = terminationOf(p, c), containerGPUs(c)
			w.servers[k] = r
		}
	}
	if addr := w.routerAddr(p); addr != "" && w.routers[k] == nil {
		r, err := startRouter(w.log, k, simContainer(p, RouterImage), addr, w.Send)
		if err != nil {
			w.log.Warn("cannot start router; will retry", "pod", k.String(), "err", err)
		} else {
			w.routers[k] = r
		}
	}
	if addr := w.exporterAddr(p); addr != "" && w.exporter[k] == nil && !w.muted[muteKey{k, ExporterImage}] {
		node := p.Spec.NodeName
		w.exporter[k] = startExporter(w.log, exporterConfig{
			pod: k, node: node, addr: addr,
			socket:   socketPath(w.opts.Dir, node),
			gpus:     w.nodeGPUsLocked(node),
			interval: w.opts.ExporterInterval,
		})
	}
}

// serverAddr is where p's inference server listens, or "" if p should
// have none.
func (w *World) serverAddr(p *corev1.Pod) string {
	c := simContainer(p, InferenceImage)
	if c == nil || !serving(p) {
		return ""
	}
	return listenAddr(p, c, w.opts.InferencePort)
}

// exporterAddr is where p's exporter listens, or "" if p should have none.
func (w *World) exporterAddr(p *corev1.Pod) string {
	c := simContainer(p, ExporterImage)
	if c == nil || !serving(p) {
		return ""
	}
	return listenAddr(p, c, w.opts.ExporterPort)
}

// syncNodesLocked gives every node a pod-resources socket and brings every
// node's GPU assignment up to date, freeing those of nodes without pods.
func (w *World) syncNodesLocked(pods []*corev1.Pod) {
	nodes, _ := w.nodes.List(labels.Everything())
	for _, n := range nodes {
		if w.sockets[n.Name] != nil {
			continue
		}
		s, err := startPodResources(w.opts.Dir, n.Name, w.podResources)
		if err != nil {
			w.log.Warn("cannot serve pod-resources; will retry", "node", n.Name, "err", err)
			continue
		}
		w.sockets[n.Name] = s
	}
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	for node := range w.gpus {
		if byNode[node] == nil {
			w.assignNodeLocked(node, nil)
		}
	}
	for node, ps := range byNode {
		w.assignNodeLocked(node, ps)
	}
}

// nodeGPUsLocked is the number of GPUs node advertises.
func (w *World) nodeGPUsLocked(node string) int {
	n, err := w.nodes.Get(node)
	if err != nil {
		return nodeGPUs(nil)
	}
	return nodeGPUs(n)
}
