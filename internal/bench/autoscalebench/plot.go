package autoscalebench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// FineBucket is the width of the TTFT p90 buckets in the per-policy plots:
// fine enough to show a cold start, coarse enough to hold a few requests.
const FineBucket = 10 * time.Second

const (
	plotWidth   = 11 * vg.Inch
	panelHeight = 3 * vg.Inch
	// legendGutter is kept right of every panel's data area for its
	// legend, which inside the data area would hide lines.
	legendGutter = 1.8 * vg.Inch
)

var (
	sloColor = color.RGBA{R: 200, A: 255}
	// policyColors is the Okabe-Ito palette (without its yellow, which
	// vanishes on white): six or more policies stay distinct, also to
	// readers with colour-blindness, where gonum's default palette repeats
	// a red.
	policyColors = []color.Color{
		color.RGBA{0x00, 0x72, 0xB2, 0xFF}, color.RGBA{0xD5, 0x5E, 0x00, 0xFF}, color.RGBA{0x00, 0x9E, 0x73, 0xFF},
		color.RGBA{0xE6, 0x9F, 0x00, 0xFF}, color.RGBA{0xCC, 0x79, 0xA7, 0xFF}, color.RGBA{0x56, 0xB4, 0xE9, 0xFF},
		color.RGBA{0x00, 0x00, 0x00, 0xFF}, color.RGBA{0x99, 0x99, 0x99, 0xFF},
	}
	unservedColor = color.Black
)

// writePlots writes <policy>.png/.svg for every policy,
// comparison.png/.svg and, when the recording has the capacity policy's
// estimates, capacity-signal.png/.svg (plotsignal.go).
//
// gonum refuses NaN and Inf points, so TTFT series are cleaned first: a
// NaN (no arrivals in the bucket) breaks the line, and +Inf (the p90 fell
// on an unserved request) is clamped to a band above every finite value
// and marked with a cross, so a starved minute stands out instead of
// vanishing.
func writePlots(dir string, rec Recording) error {
	for _, p := range rec.Policies {
		panels, err := policyPanels(rec, p)
		if err != nil {
			return fmt.Errorf("plotting policy %q: %w", p.Policy, err)
		}
		if err := saveStack(filepath.Join(dir, plotFileName(p.Policy)), panels); err != nil {
			return fmt.Errorf("plotting policy %q: %w", p.Policy, err)
		}
	}
	panels, err := comparisonPanels(rec)
	if err != nil {
		return fmt.Errorf("plotting comparison: %w", err)
	}
	if err := saveStack(filepath.Join(dir, "comparison"), panels); err != nil {
		return err
	}
	return writeSignalPlot(dir, rec)
}

// plotFileName keeps a policy name from escaping dir or making an odd file.
func plotFileName(policy string) string {
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		}
		return '_'
	}, policy)
	if strings.Trim(name, ".") == "" {
		return "policy"
	}
	return name
}

func policyPanels(rec Recording, p PolicyRecording) ([]*plot.Plot, error) {
	rate, err := ratePanel(rec)
	if err != nil {
		return nil, err
	}
	rate.Title.Text = p.Policy + ": " + p.Describe
	reps, err := replicasPanel(rec, p)
	if err != nil {
		return nil, err
	}
	ttft, err := ttftPanel(rec, []PolicyRecording{p}, FineBucket,
		fmt.Sprintf("TTFT p90 per %v (s)", FineBucket))
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{rate, reps, ttft}, nil
}

func comparisonPanels(rec Recording) ([]*plot.Plot, error) {
	reps := newPanel(rec, "ready replicas")
	peak := 1
	for i, p := range rec.Policies {
		top, err := addSampleLine(reps, rec, p, p.Policy, func(s Sample) int { return s.Ready }, policyColor(i), nil)
		if err != nil {
			return nil, err
		}
		peak = max(peak, top)
	}
	reps.Y.Min, reps.Y.Max = 0, float64(peak)*1.15
	reps.Title.Text = "All policies: ready replicas and TTFT p90 per trace minute"
	ttft, err := ttftPanel(rec, rec.Policies, time.Minute, "TTFT p90 per minute (s)")
	if err != nil {
		return nil, err
	}
	return []*plot.Plot{reps, ttft}, nil
}

// newPanel returns a plot whose x axis is trace minutes over the slice, so
// that stacked panels line up.
func newPanel(rec Recording, ylabel string) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "trace time (min)"
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = 0, max(rec.Duration.Minutes(), 1.0/60)
	p.Legend.Top = true
	p.Legend.XOffs = legendGutter
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Add(plotter.NewGrid())
	return p
}

func ratePanel(rec Recording) (*plot.Plot, error) {
	p := newPanel(rec, "requests/s")
	var peak float64
	var pts plotter.XYs
	if rec.RateBucket > 0 && len(rec.RequestRate) > 0 {
		for i, r := range rec.RequestRate {
			if math.IsNaN(r) || math.IsInf(r, 0) {
				r = 0
			}
			pts = append(pts, plotter.XY{X: (time.Duration(i) * rec.RateBucket).Minutes(), Y: r})
			peak = max(peak, r)
		}
		// Close the last bucket so the step covers it.
		end := time.Duration(len(rec.RequestRate)) * rec.RateBucket
		pts = append(pts, plotter.XY{X: end.Minutes(), Y: pts[len(pts)-1].Y})
	}
	l, err := stepLine(pts, policyColor(0), nil)
	if err != nil {
		return nil, err
	}
	if l != nil {
		p.Add(l)
	}
	if peak <= 0 {
		peak = 1
	}
	p.Y.Min, p.Y.Max = 0, peak*1.15
	return p, nil
}

func replicasPanel(rec Recording, pr PolicyRecording) (*plot.Plot, error) {
	p := newPanel(rec, "replicas")
	series := []struct {
		name   string
		get    func(Sample) int
		dashes []vg.Length
	}{
		{"desired", func(s Sample) int { return s.Desired }, nil},
		{"ready", func(s Sample) int { return s.Ready }, nil},
		// Pods are what is billed; the gap to ready is GPUs paid for
		// while a model loads.
		{"pods (billed)", func(s Sample) int { return s.Pods }, []vg.Length{vg.Points(2), vg.Points(2)}},
	}
	peak := 1
	for i, sr := range series {
		top, err := addSampleLine(p, rec, pr, sr.name, sr.get, policyColor(i), sr.dashes)
		if err != nil {
			return nil, err
		}
		peak = max(peak, top)
	}
	p.Y.Min, p.Y.Max = 0, float64(peak)*1.15
	return p, nil
}

// samplePoints turns samples into step points in minutes, drawing the
// first value from 0 and the last until the end of the slice, as
// GPUSeconds integrates them.
func samplePoints(rec Recording, pr PolicyRecording, get func(Sample) int) plotter.XYs {
	if len(pr.Samples) == 0 {
		return nil
	}
	pts := plotter.XYs{{X: 0, Y: float64(get(pr.Samples[0]))}}
	for _, s := range pr.Samples {
		pts = append(pts, plotter.XY{X: s.At.Minutes(), Y: float64(get(s))})
	}
	last := pts[len(pts)-1]
	if end := rec.Duration.Minutes(); end > last.X {
		pts = append(pts, plotter.XY{X: end, Y: last.Y})
	}
	return pts
}

// stepLine returns nil for no points: gonum would draw nothing anyway and
// a policy without samples must still get its plot.
// addSampleLine adds one series of a policy's samples to p as a step line
// named name, and returns the series' largest value.
func addSampleLine(p *plot.Plot, rec Recording, pr PolicyRecording, name string, get func(Sample) int, c color.Color, dashes []vg.Length) (peak int, err error) {
	l, err := stepLine(samplePoints(rec, pr, get), c, dashes)
	if err != nil {
		return 0, err
	}
	if l != nil {
		p.Add(l)
		p.Legend.Add(name, l)
	}
	for _, s := range pr.Samples {
		peak = max(peak, get(s))
	}
	return peak, nil
}

func stepLine(pts plotter.XYs, c color.Color, dashes []vg.Length) (*plotter.Line, error) {
	if len(pts) == 0 {
		return nil, nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.StepStyle = plotter.PostStep
	l.Color = c
	l.Width = vg.Points(1.2)
	l.Dashes = dashes
	return l, nil
}

// ttftPanel draws the TTFT p90 per bucket of each policy on a log axis with
// the SLO as a dashed line. Points sit at bucket centres.
func ttftPanel(rec Recording, prs []PolicyRecording, bucket time.Duration, ylabel string) (*plot.Plot, error) {
	p := newPanel(rec, ylabel)
	p.Y.Scale = plot.LogScale{}
	series := make([][]float64, len(prs))
	for i, pr := range prs {
		series[i] = BucketP90(pr, rec.Duration, bucket)
	}
	lo, hi, infY := logRange(series, rec.SLO.Seconds())
	p.Y.Min, p.Y.Max = lo, hi
	p.Y.Tick.Marker = ttftTicks{infY: infY}
	var unserved plotter.XYs
	for i, ys := range series {
		inf, err := addTTFTSeries(p, prs[i].Policy, ys, bucket, lo, infY, policyColor(i))
		if err != nil {
			return nil, err
		}
		unserved = append(unserved, inf...)
	}
	if err := addUnserved(p, unserved); err != nil {
		return nil, err
	}
	if slo := rec.SLO.Seconds(); slo > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: p.X.Min, Y: slo}, {X: p.X.Max, Y: slo}})
		if err != nil {
			return nil, err
		}
		l.Color, l.Width = sloColor, vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("SLO %v", rec.SLO), l)
	}
	return p, nil
}

// logRange picks a log axis that holds every finite positive value and the
// SLO, and a band a decade above them (infY) where +Inf values are drawn.
func logRange(series [][]float64, slo float64) (lo, hi, infY float64) {
	lo, top := math.Inf(1), math.Inf(-1)
	if slo > 0 {
		lo, top = slo, slo
	}
	for _, ys := range series {
		for _, y := range ys {
			if y > 0 && !math.IsInf(y, 1) {
				lo, top = min(lo, y), max(top, y)
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, top = 0.1, 1
	}
	infY = top * 10
	return lo / 2, infY * 2, infY
}

// ttftTicks labels the +Inf band "unserved" and leaves the log ticks
// between the finite values and that band unlabelled, so no label claims
// a TTFT that the band stands in for.
type ttftTicks struct{ infY float64 }

func (t ttftTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, tk := range (plot.LogTicks{Prec: -1}).Ticks(min, max) {
		if tk.Value > t.infY/3 {
			tk.Label = ""
		}
		if tk.Value != t.infY {
			out = append(out, tk)
		}
	}
	return append(out, plot.Tick{Value: t.infY, Label: "unserved"})
}

// addTTFTSeries adds ys as line segments split at NaN, with +Inf clamped
// to infY, and values at or below zero (a log axis cannot show them) raised
// to floor. It returns the clamped +Inf points, for the caller to cross.
func addTTFTSeries(p *plot.Plot, name string, ys []float64, bucket time.Duration, floor, infY float64, c color.Color) (plotter.XYs, error) {
	var seg, unserved plotter.XYs
	legend := false
	flush := func() error {
		if len(seg) == 0 {
			return nil
		}
		l, s, err := plotter.NewLinePoints(seg)
		if err != nil {
			return err
		}
		l.Color, s.Color = c, c
		s.Radius = vg.Points(1.5)
		p.Add(l, s)
		if !legend {
			p.Legend.Add(name, l, s)
			legend = true
		}
		seg = nil
		return nil
	}
	for i, y := range ys {
		x := (time.Duration(i)*bucket + bucket/2).Minutes()
		switch {
		case math.IsNaN(y):
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		case math.IsInf(y, 1):
			y = infY
			unserved = append(unserved, plotter.XY{X: x, Y: y})
		case y <= floor:
			y = floor
		}
		seg = append(seg, plotter.XY{X: x, Y: y})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return unserved, nil
}

func addUnserved(p *plot.Plot, pts plotter.XYs) error {
	if len(pts) == 0 {
		return nil
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	s.Shape = draw.CrossGlyph{}
	s.Color = unservedColor
	s.Radius = vg.Points(4)
	p.Add(s)
	p.Legend.Add("p90 unserved (inf)", s)
	return nil
}

// saveStack draws panels stacked vertically, aligned on their data areas,
// to base.png and base.svg.
func saveStack(base string, panels []*plot.Plot) error {
	h := panelHeight * vg.Length(len(panels))
	for _, f := range []struct {
		ext    string
		canvas vg.CanvasWriterTo
	}{
		{".png", vgimg.PngCanvas{Canvas: vgimg.New(plotWidth, h)}},
		{".svg", vgsvg.New(plotWidth, h)},
	} {
		rows := make([][]*plot.Plot, len(panels))
		for i, p := range panels {
			rows[i] = []*plot.Plot{p}
		}
		tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadY: vg.Millimeter * 3,
			PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
			PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
		canvases := plot.Align(rows, tiles, draw.New(f.canvas))
		for i, p := range panels {
			p.Draw(draw.Crop(canvases[i][0], 0, -legendGutter, 0, 0))
		}
		if err := writeCanvas(base+f.ext, f.canvas); err != nil {
			return err
		}
	}
	return nil
}

func writeCanvas(path string, c vg.CanvasWriterTo) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating %s: %w", path, err)
	}
	if _, err := c.WriteTo(f); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", path, err)
	}
	return nil
}

// policyColor is the i-th series' colour.
func policyColor(i int) color.Color { return policyColors[i%len(policyColors)] }
