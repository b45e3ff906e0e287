package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/inferpick/inferpick/test/bench/routing"
)

// Plot file names inside the plots directory.
const (
	plotTTFT  = "ttft_p90_vs_rate.png"
	plotHit   = "hit_rate.png"
	plotBurst = "burst_load.png"
)

// plot draws the routing benchmark's figures into dir.
func (r *report) plot(dir string) error {
	if err := scalingPlots(r.scaling, dir); err != nil {
		return err
	}
	if len(r.matrix) > 0 {
		p, err := matrixPlot(r.matrix)
		if err != nil {
			return err
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, plotMatrix)); err != nil {
			return fmt.Errorf("plot %s: %w", plotMatrix, err)
		}
	}
	if len(r.routing) == 0 {
		return nil
	}
	for name, draw := range map[string]func() (*plot.Plot, error){
		plotTTFT:  r.ttftPlot,
		plotHit:   r.hitPlot,
		plotBurst: r.burstPlot,
	} {
		p, err := draw()
		if err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		if p == nil {
			continue
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
	}
	return nil
}

func (r *report) ttftPlot() (*plot.Plot, error) {
	if !r.anyShared() {
		return nil, nil // no shared-prefix run (-workloads left them out)
	}
	p := plot.New()
	p.Title.Text = "Shared prefix: TTFT p90 vs arrival rate"
	p.X.Label.Text = "arrival rate (requests per simulated second)"
	p.Y.Label.Text = "TTFT p90 (simulated seconds, log)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	for i, pol := range r.policyLabels() {
		var xy plotter.XYs
		for _, res := range r.sharedRuns(pol) {
			xy = append(xy, plotter.XY{X: res.Rate, Y: max(res.Quantile(0.9), 1e-3)})
		}
		if len(xy) == 0 {
			continue
		}
		if err := addSeries(p, i, pol, xy); err != nil {
			return nil, err
		}
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// addSeries adds xy to p as line and points in the i-th color and shape,
// with a legend entry.
func addSeries(p *plot.Plot, i int, legend string, xy plotter.XYs) error {
	line, points, err := plotter.NewLinePoints(xy)
	if err != nil {
		return err
	}
	c := plotutil.Color(i)
	line.Color, points.Color = c, c
	line.Width = vg.Points(1.5)
	points.Shape = plotutil.Shape(i)
	p.Add(line, points)
	p.Legend.Add(legend, line, points)
	return nil
}

func (r *report) hitPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Shared prefix: prefix-cache hit rate per policy (mean over rates)"
	p.Y.Label.Text = "hit rate (cached / prompt tokens)"
	labels := r.policyLabels()
	vals := make(plotter.Values, len(labels))
	oracle := 0.0
	for i, pol := range labels {
		runs := r.sharedRuns(pol)
		for _, res := range runs {
			vals[i] += res.HitRate / float64(len(runs))
			oracle = res.Oracle
		}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(30))
	if err != nil {
		return nil, err
	}
	bars.Color = color.RGBA{R: 70, G: 120, B: 190, A: 255}
	p.Add(bars)
	ora, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: oracle}, {X: float64(len(labels)) - 0.5, Y: oracle}})
	if err != nil {
		return nil, err
	}
	ora.Color = color.RGBA{R: 200, A: 255}
	ora.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(ora)
	p.Legend.Add(fmt.Sprintf("oracle %.2f", oracle), ora)
	p.Legend.Top = true
	p.NominalX(labels...)
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	return p, nil
}

// burstPlot shows, per policy, the busiest pod's in-flight count and the
// pods' mean over the burst: the gap between the two is the skew.
func (r *report) burstPlot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "Burst of 64 requests on one prefix: busiest pod vs mean pod (solid max, dashed mean)"
	p.X.Label.Text = "simulated seconds since the run started"
	p.Y.Label.Text = "requests in flight (picker's count)"
	p.Legend.Top, p.Legend.Left = true, true
	for i, pol := range r.policyLabels() {
		res := r.find(pol, "burst")
		if res == nil || len(res.Load) == 0 {
			continue
		}
		var top, mean plotter.XYs
		for _, s := range res.Load {
			var m, sum float64
			for _, l := range s.Load {
				m = max(m, float64(l))
				sum += float64(l)
			}
			top = append(top, plotter.XY{X: s.At, Y: m})
			mean = append(mean, plotter.XY{X: s.At, Y: sum / float64(max(len(s.Load), 1))})
		}
		lt, err := plotter.NewLine(top)
		if err != nil {
			return nil, err
		}
		lm, err := plotter.NewLine(mean)
		if err != nil {
			return nil, err
		}
		c := plotutil.Color(i)
		lt.Color, lm.Color = c, c
		lt.Width = vg.Points(1.5)
		lm.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(lt, lm)
		p.Legend.Add(pol, lt)
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// policyLabels returns the policies of the routing results, in run order.
func (r *report) policyLabels() []string {
	var out []string
	seen := map[string]bool{}
	for _, res := range r.routing {
		if !seen[res.Policy] {
			seen[res.Policy] = true
			out = append(out, res.Policy)
		}
	}
	return out
}

func (r *report) sharedRuns(pol string) []*routing.Result {
	var out []*routing.Result
	for _, res := range r.routing {
		if res.Policy == pol && res.Rate > 0 && len(res.Workload) > 13 && res.Workload[:13] == "shared-prefix" {
			out = append(out, res)
		}
	}
	return out
}

func (r *report) find(pol, workload string) *routing.Result {
	for _, res := range r.routing {
		if res.Policy == pol && (res.Workload == workload || len(workload) < len(res.Workload) && res.Workload[:len(workload)+1] == workload+"@") {
			return res
		}
	}
	return nil
}

// anyShared reports whether some run is a shared-prefix run.
func (r *report) anyShared() bool {
	for _, res := range r.routing {
		if strings.HasPrefix(res.Workload, "shared-prefix") {
			return true
		}
	}
	return false
}
