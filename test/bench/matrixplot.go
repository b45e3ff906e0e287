package main

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

const plotMatrix = "routing_matrix.png"

// matrixPlot draws, for every matrix run of a sharing workload, cache-aware's
// TTFT p90 relative to round-robin's and to weighted-scorer's, and its hit
// rate relative to the oracle; the targets are the lines at 0.5, 1 and 0.95.
func matrixPlot(runs []matrixRun) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Routing matrix: cache-aware relative to the anchors, per cell and workload"
	p.X.Label.Text = "matrix run (cells in report order; shared-prefix and multi-turn)"
	p.Y.Label.Text = "ratio (log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	series := []struct {
		label string
		ratio func(m matrixRun) (float64, bool)
	}{
		{"p90 / round-robin p90 (target ≤ 0.5)", func(m matrixRun) (float64, bool) { return m.p90Ratio("round-robin") }},
		{"p90 / weighted-scorer p90 (target ≤ 1)", func(m matrixRun) (float64, bool) { return m.p90Ratio("weighted-scorer") }},
		{"hit / oracle (target ≥ 0.95)", func(m matrixRun) (float64, bool) {
			if len(m.Runs["cache-aware"]) == 0 || m.oracle() == 0 {
				return 0, false
			}
			return m.hit("cache-aware") / m.oracle(), true
		}},
	}
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range series {
		var xy plotter.XYs
		x := 0
		for _, m := range runs {
			if m.Workload == matrixNoSharing {
				continue
			}
			x++
			if v, ok := s.ratio(m); ok {
				v = max(v, 1e-3)
				lo, hi = min(lo, v), max(hi, v)
				xy = append(xy, plotter.XY{X: float64(x), Y: v})
			}
		}
		if len(xy) == 0 {
			continue
		}
		pts, err := plotter.NewScatter(xy)
		if err != nil {
			return nil, fmt.Errorf("matrix plot: %w", err)
		}
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		pts.Radius = vg.Points(3)
		p.Add(pts)
		p.Legend.Add(s.label, pts)
	}
	if lo <= hi {
		// A range of its own, since the axis' default padding of a single
		// value (every ratio 1, say) reaches 0, which a log scale refuses.
		p.Y.Min, p.Y.Max = lo/2, hi*2
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// p90Ratio is cache-aware's median TTFT p90 over other's, both counting
// every request sent, and against the weighted scorer those of the runs
// that decide that verdict (closeP90); false when either is missing, zero
// or never reached (a plot in log scale has no place for it).
func (m matrixRun) p90Ratio(other string) (float64, bool) {
	pa, _, _, okA := m.p90("cache-aware")
	pb, _, _, okB := m.p90(other)
	if other == "weighted-scorer" {
		pa, okA = m.closeP90("cache-aware")
		pb, okB = m.closeP90(other)
	}
	if !okA || !okB || pb == 0 || math.IsInf(pa, 1) || math.IsInf(pb, 1) {
		return 0, false
	}
	return pa / pb, true
}
