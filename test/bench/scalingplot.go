package main

import (
	"fmt"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// Plot file names of the scaling table.
const (
	plotScalingPick = "scaling_pick.png"
	plotScalingHeap = "scaling_heap.png"
)

func plotPath(dir, name string) string { return filepath.ToSlash(filepath.Join(dir, name)) }

// scalingPlots draws the pick cost and the live heap against the number of
// workers, one line per body size, on log-log axes.
func scalingPlots(ps []scalingPoint, dir string) error {
	if len(ps) == 0 {
		return nil
	}
	for name, draw := range map[string]func([]scalingPoint) (*plot.Plot, error){
		plotScalingPick: scalingPickPlot,
		plotScalingHeap: scalingHeapPlot,
	} {
		p, err := draw(ps)
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
	}
	return nil
}

func scalingPickPlot(ps []scalingPoint) (*plot.Plot, error) {
	return scalingPlot(ps, "Whole pick (in process) vs workers", "pick CPU per request (µs, log)",
		func(p scalingPoint) float64 { return p.NsPerPick / 1e3 })
}

func scalingHeapPlot(ps []scalingPoint) (*plot.Plot, error) {
	return scalingPlot(ps, "Live heap of registry, policy, warm index and server vs workers", "live heap (MB, log)",
		func(p scalingPoint) float64 { return float64(max(p.HeapBytes, 1<<10)) / (1 << 20) })
}

func scalingPlot(ps []scalingPoint, title, ylabel string, y func(scalingPoint) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "workers (log)"
	p.Y.Label.Text = ylabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	for i, size := range scalingBodies {
		var xy plotter.XYs
		for _, n := range scalingWorkers {
			if pt, ok := findPoint(ps, n, size); ok {
				xy = append(xy, plotter.XY{X: float64(n), Y: y(pt)})
			}
		}
		if len(xy) == 0 {
			continue
		}
		if err := addSeries(p, i, fmt.Sprintf("%d KB body", size>>10), xy); err != nil {
			return nil, err
		}
	}
	p.Add(plotter.NewGrid())
	return p, nil
}
