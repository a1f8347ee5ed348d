package exporter

import (
	"maps"
	"time"

	"github.com/gpuscale/gpuscale/pkg/metrics"
)

// maxXIDEvents bounds the XID increments remembered per device: a GPU
// raising XIDs in every collection for the whole window (300 at the default
// 1 s interval and 5 min window) stays within it, and a driver flooding
// events cannot grow it.
const maxXIDEvents = 1024

// xidEvent is one collection's increase of one XID code on a device.
type xidEvent struct {
	at   time.Time
	code uint64
	n    uint64
}

// xidHistory is what is remembered of one device's XIDs.
type xidHistory struct {
	last   map[uint64]uint64 // cumulative counts at the previous collection
	events []xidEvent        // increases within the window, oldest first
	seen   bool              // in the current collection
}

// xidWindows derives DCGM_EXP_XID_ERRORS_COUNT, the XIDs of each code
// within the window, from the backends' cumulative counts: it remembers the
// collections in which a count grew. A collection's increase is dated at
// that collection, so the window is exact to the collection interval.
// Only the collection loop touches it.
type xidWindows struct {
	window  time.Duration
	devices map[string]*xidHistory
}

func newXIDWindows(window time.Duration) xidWindows {
	return xidWindows{window: window, devices: map[string]*xidHistory{}}
}

// observe records the collection at now and sets each watched device's
// XIDWindow. Devices gone from the collection are forgotten.
func (w *xidWindows) observe(now time.Time, devices []metrics.DeviceState) {
	if w.window <= 0 {
		return
	}
	for _, h := range w.devices {
		h.seen = false
	}
	for i := range devices {
		d := &devices[i]
		id := d.Reading.Device.ID()
		h := w.devices[id]
		if h != nil {
			h.seen = true // an unreadable device keeps its history
		}
		counts := d.Reading.XIDCounts
		if !d.Reading.Healthy() || counts == nil {
			continue
		}
		if h == nil {
			h = &xidHistory{last: map[uint64]uint64{}, seen: true}
			w.devices[id] = h
		}
		for code, n := range counts {
			switch prev := h.last[code]; {
			case n > prev:
				h.events = append(h.events, xidEvent{at: now, code: code, n: n - prev})
			case n < prev:
				// The backend restarted its count: n happened since.
				if n > 0 {
					h.events = append(h.events, xidEvent{at: now, code: code, n: n})
				}
			}
		}
		h.last = maps.Clone(counts)
		cut := 0
		for cut < len(h.events) && (now.Sub(h.events[cut].at) >= w.window || len(h.events)-cut > maxXIDEvents) {
			cut++
		}
		h.events = h.events[cut:]
		window := make(map[uint64]uint64, len(h.events))
		for _, e := range h.events {
			window[e.code] += e.n
		}
		d.XIDWindow = window
	}
	for id, h := range w.devices {
		if !h.seen {
			delete(w.devices, id)
		}
	}
}
