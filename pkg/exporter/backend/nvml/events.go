//go:build linux && cgo

package nvml

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscale/gpuscale/pkg/gpu"
)

const (
	// noInstance is NVML's GPU instance ID for "not a MIG instance", both in
	// event data and as the key of a whole GPU's tally here.
	noInstance = ^uint32(0)
	// waitTimeoutMs bounds each EventSetWait, and so how long Close waits
	// for the watcher goroutine to notice it should stop.
	waitTimeoutMs = 1000
	// waitRetryDelay spaces out retries when waiting fails (a lost GPU can
	// make every wait fail at once).
	waitRetryDelay = time.Second
	// maxGPUInstanceID bounds the GPU instance IDs that get a tally of
	// their own. MIG numbers instances from 1 to 14 on today's GPUs; an
	// event naming any other instance counts on its GPU only, so that
	// event data cannot grow the tallies without bound.
	maxGPUInstanceID = 31
)

// xidTally is what is known of the XID errors of a GPU or MIG instance.
type xidTally struct {
	counts map[uint64]uint64
	last   uint64
}

// xidWatcher counts XID critical error events in a goroutine. Collect reads
// the counts, so they are guarded by mu.
type xidWatcher struct {
	set gonvml.EventSet
	log *slog.Logger

	mu sync.Mutex
	// tallies maps a GPU UUID to its tallies by GPU instance ID; noInstance
	// holds the whole GPU's, which include its instances' events.
	tallies map[string]map[uint32]*xidTally
	// dropped counts events not tallied: codes outside the XID range, or
	// new codes past gpu.MaxXIDCodes on a device.
	dropped uint64

	started bool
	stop    chan struct{}
	done    chan struct{}
}

// newXIDWatcher creates the event set. It returns nil, after logging, when
// NVML cannot create one: the exporter then runs without XID metrics.
func newXIDWatcher(lib gonvml.Interface, log *slog.Logger) *xidWatcher {
	set, ret := lib.EventSetCreate()
	if ret != gonvml.SUCCESS {
		log.Warn("cannot create NVML event set; XID errors will not be reported", "err", ret.Error())
		return nil
	}
	return &xidWatcher{
		set:     set,
		log:     log,
		tallies: make(map[string]map[uint32]*xidTally),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
}

// register subscribes a GPU to XID events and reports whether it worked.
// GPUs that do not support events (some virtualised ones) are logged and
// reported without XID fields rather than failing.
func (w *xidWatcher) register(h gonvml.Device, uuid string) bool {
	ret := h.RegisterEvents(gonvml.EventTypeXidCriticalError, w.set)
	if ret != gonvml.SUCCESS {
		w.log.Warn("cannot watch XID events of GPU", "uuid", uuid, "err", ret.Error())
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.tallies[uuid] == nil {
		w.tallies[uuid] = make(map[uint32]*xidTally)
	}
	return true
}

func (w *xidWatcher) start() {
	w.started = true
	go w.run()
}

// close stops the goroutine, then frees the event set: freeing a set that
// is being waited on is undefined in NVML.
func (w *xidWatcher) close() {
	if w.started {
		close(w.stop)
		<-w.done
	}
	if ret := w.set.Free(); ret != gonvml.SUCCESS {
		w.log.Warn("cannot free NVML event set", "err", ret.Error())
	}
}

func (w *xidWatcher) run() {
	defer close(w.done)
	var lastErr gonvml.Return = gonvml.SUCCESS
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		ev, ret := w.wait()
		switch ret {
		case gonvml.SUCCESS:
			w.record(ev)
		case gonvml.ERROR_TIMEOUT:
		default:
			// Log a failure once, not every second while it lasts.
			if ret != lastErr {
				w.log.Warn("waiting for NVML events failed; retrying", "err", ret.Error())
			}
			select {
			case <-w.stop:
				return
			case <-time.After(waitRetryDelay):
			}
		}
		lastErr = ret
	}
}

// wait is one EventSetWait; a panic (in a mock, say) is turned into
// ERROR_UNKNOWN so that it cannot bring the exporter down.
func (w *xidWatcher) wait() (ev gonvml.EventData, ret gonvml.Return) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("panic while waiting for NVML events", "panic", fmt.Sprint(p))
			ev, ret = gonvml.EventData{}, gonvml.ERROR_UNKNOWN
		}
	}()
	return w.set.Wait(waitTimeoutMs)
}

// record counts one event against its GPU and, for an event raised inside
// a MIG instance, against that instance too.
func (w *xidWatcher) record(ev gonvml.EventData) {
	defer func() {
		if p := recover(); p != nil {
			w.log.Error("panic while handling an NVML event", "panic", fmt.Sprint(p))
		}
	}()
	if ev.EventType&gonvml.EventTypeXidCriticalError == 0 || ev.Device == nil {
		return
	}
	uuid, err := parentUUID(ev.Device)
	if err != nil {
		w.log.Warn("XID event from an unidentifiable device", "xid", ev.EventData, "err", err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	byInstance, ok := w.tallies[uuid]
	if !ok {
		w.log.Debug("XID event from a GPU this backend does not watch", "uuid", uuid, "xid", ev.EventData)
		return
	}
	code := ev.EventData
	if !gpu.ValidXID(code) {
		w.dropLocked("XID event with a code outside the XID range dropped", uuid, ev)
		return
	}
	// Logged here, after the range check, so that a driver sending
	// garbage cannot flood the log; real XIDs are rare.
	w.log.Warn("XID error", "uuid", uuid, "xid", code, "gpu_instance", ev.GpuInstanceId)
	keys := []uint32{noInstance}
	if ev.GpuInstanceId <= maxGPUInstanceID {
		keys = append(keys, ev.GpuInstanceId)
	}
	full := false
	for _, k := range keys {
		t := byInstance[k]
		if t == nil {
			t = &xidTally{counts: make(map[uint64]uint64)}
			byInstance[k] = t
		}
		if _, seen := t.counts[code]; !seen && len(t.counts) >= gpu.MaxXIDCodes {
			full = true
			continue
		}
		t.counts[code]++
		t.last = code
	}
	if full {
		w.dropLocked("XID event with a new code on a device that already counts the most distinct codes kept dropped", uuid, ev)
	}
}

// dropLocked counts an event that was not tallied. Only the first drop is
// a warning: a driver that keeps sending bad events must not flood the log.
func (w *xidWatcher) dropLocked(msg, uuid string, ev gonvml.EventData) {
	w.dropped++
	level := slog.LevelDebug
	if w.dropped == 1 {
		level = slog.LevelWarn
	}
	w.log.Log(context.Background(), level, msg, "uuid", uuid, "xid", ev.EventData,
		"gpu_instance", ev.GpuInstanceId, "max_codes", gpu.MaxXIDCodes, "dropped", w.dropped)
}

// droppedEvents returns how many events were not tallied.
func (w *xidWatcher) droppedEvents() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dropped
}

// parentUUID returns the UUID of the whole GPU an event came from. Events
// name the GPU, but resolve a MIG handle to its parent in case one does not.
func parentUUID(d gonvml.Device) (string, error) {
	uuid, ret := d.GetUUID()
	if ret != gonvml.SUCCESS {
		return "", &Error{Op: "get UUID", Return: ret}
	}
	if !strings.HasPrefix(uuid, "MIG-") {
		return uuid, nil
	}
	parent, ret := d.GetDeviceHandleFromMigDeviceHandle()
	if ret != gonvml.SUCCESS {
		return "", &Error{Op: "get parent of MIG device", Return: ret}
	}
	uuid, ret = parent.GetUUID()
	if ret != gonvml.SUCCESS {
		return "", &Error{Op: "get UUID", Return: ret}
	}
	return uuid, nil
}

// snapshot copies a tally so that Readings never share the watcher's maps.
func (w *xidWatcher) snapshot(uuid string, instance uint32) (map[uint64]uint64, uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tallies[uuid][instance]
	if t == nil {
		return map[uint64]uint64{}, 0
	}
	return maps.Clone(t.counts), t.last
}

// addXIDs sets a reading's XID fields when its GPU is watched: LastXID is 0
// and XIDCounts empty until an XID happens. Unwatched GPUs get neither, so
// "no XID seen" is never claimed where XIDs cannot be seen.
func (b *Backend) addXIDs(g *gpuDevice, r *gpu.Reading, instance uint32) {
	if b.xid == nil || !g.xidWatched {
		return
	}
	counts, last := b.xid.snapshot(g.dev.UUID, instance)
	r.XIDCounts = counts
	r.Set(gpu.FieldLastXID, float64(last))
}

// DroppedXIDEvents returns how many XID events were not counted because
// their code was outside the XID range or their device already counted
// gpu.MaxXIDCodes distinct codes.
func (b *Backend) DroppedXIDEvents() uint64 {
	if b.xid == nil {
		return 0
	}
	return b.xid.droppedEvents()
}
