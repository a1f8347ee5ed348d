package autoscalebench

import (
	"fmt"
	"math"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// signalPlotName is the file (.png and .svg) that shows the capacity
// signal's parts beside the capacity policy's replicas.
const signalPlotName = "capacity-signal"

// writeSignalPlot writes capacity-signal.png/.svg when the recording holds
// the adapter's capacity estimates: demand against the capacity the
// replicas serve, the replicas asked for against those that ran, the
// per-replica capacity and the start-up horizon with the projected trend,
// over the slice. It writes nothing for a recording without estimates
// (one made before they were recorded, or without the capacity policy).
func writeSignalPlot(dir string, rec Recording) error {
	for _, pr := range rec.Policies {
		if pr.Policy != PolicyCapacity || len(pr.Capacity) == 0 {
			continue
		}
		panels, err := signalPanels(rec, pr)
		if err != nil {
			return fmt.Errorf("plotting the capacity signal: %w", err)
		}
		return saveStack(filepath.Join(dir, signalPlotName), panels)
	}
	return nil
}

// dashed is the dash pattern of a series drawn beside a solid one.
var dashed = []vg.Length{vg.Points(4), vg.Points(2)}

// partLine is one series of the estimates: its name, value and style.
type partLine struct {
	name   string
	get    func(CapacityParts) float64
	dashes []vg.Length
}

func signalPanels(rec Recording, pr PolicyRecording) ([]*plot.Plot, error) {
	speedup := max(rec.Speedup, 1)
	demand := newPanel(rec, "requests")
	demand.Title.Text = "capacity: the signal's parts (adapter's gpuscale_adapter_capacity_*, each HPA sync) and the replicas"
	if err := addParts(demand, rec, pr, []partLine{
		{"demand (running + waiting)", func(c CapacityParts) float64 { return c.Demand }, nil},
		{"forecast over the horizon", func(c CapacityParts) float64 { return c.Forecast }, dashed},
		{"capacity of ready replicas", func(c CapacityParts) float64 { return c.PerReplica * c.Ready }, nil},
		{"+ loading credit", func(c CapacityParts) float64 { return c.PerReplica*c.Ready + c.LoadingCredit }, dashed},
	}); err != nil {
		return nil, err
	}

	reps := newPanel(rec, "replicas")
	if err := addParts(reps, rec, pr, []partLine{
		{"needed (the larger term)", func(c CapacityParts) float64 { return c.Needed }, dashed},
		{"KV-cache term", func(c CapacityParts) float64 { return c.KVNeeded }, []vg.Length{vg.Points(4), vg.Points(2)}},
		{"prefill term", func(c CapacityParts) float64 { return c.PrefillNeeded }, []vg.Length{vg.Points(6), vg.Points(2), vg.Points(1), vg.Points(2)}},
		{"reporting fresh data", func(c CapacityParts) float64 { return c.Reporting }, []vg.Length{vg.Points(1), vg.Points(2)}},
	}); err != nil {
		return nil, err
	}
	for i, sr := range []struct {
		name   string
		get    func(Sample) int
		dashes []vg.Length
	}{
		{"desired (HPA)", func(s Sample) int { return s.Desired }, nil},
		{"ready", func(s Sample) int { return s.Ready }, nil},
		{"pods (billed)", func(s Sample) int { return s.Pods }, []vg.Length{vg.Points(2), vg.Points(2)}},
	} {
		if _, err := addSampleLine(reps, rec, pr, sr.name, sr.get, policyColor(i+2), sr.dashes); err != nil {
			return nil, err
		}
	}
	reps.Y.Min = 0

	per := newPanel(rec, "requests per replica")
	if err := addParts(per, rec, pr, []partLine{
		{"KV slots per replica", func(c CapacityParts) float64 { return c.Slots }, dashed},
		{"served within objective (Erlang C)", func(c CapacityParts) float64 { return c.PerReplica }, nil},
	}); err != nil {
		return nil, err
	}
	per.Y.Min = 0

	horizon := newPanel(rec, "trace s; requests/trace s x 100")
	if err := addParts(horizon, rec, pr, []partLine{
		{"start-up horizon (trace s)", func(c CapacityParts) float64 { return c.HorizonSeconds * speedup }, nil},
		{"projected trend x 100", func(c CapacityParts) float64 { return 100 * c.Trend / speedup }, dashed},
		{"trend std. error x 100", func(c CapacityParts) float64 { return 100 * c.TrendStdErr / speedup }, []vg.Length{vg.Points(1), vg.Points(2)}},
	}); err != nil {
		return nil, err
	}
	return []*plot.Plot{demand, reps, per, horizon}, nil
}

// addParts adds each series of pr's capacity estimates to p as a step
// line, coloured by its place in lines.
func addParts(p *plot.Plot, rec Recording, pr PolicyRecording, lines []partLine) error {
	for i, ln := range lines {
		pts := make(plotter.XYs, 0, len(pr.Capacity)+1)
		for _, c := range pr.Capacity {
			// gonum refuses NaN and Inf; a gauge never holds them, but
			// a recording is read back from a file.
			if y := ln.get(c); !math.IsNaN(y) && !math.IsInf(y, 0) {
				pts = append(pts, plotter.XY{X: c.At.Minutes(), Y: y})
			}
		}
		if len(pts) == 0 {
			continue
		}
		if last := pts[len(pts)-1]; rec.Duration.Minutes() > last.X {
			pts = append(pts, plotter.XY{X: rec.Duration.Minutes(), Y: last.Y})
		}
		l, err := stepLine(pts, policyColor(i), ln.dashes)
		if err != nil {
			return fmt.Errorf("%s: %w", ln.name, err)
		}
		p.Add(l)
		p.Legend.Add(ln.name, l)
	}
	return nil
}
