package main

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// errNoChart: the run has no load figure to draw (only sessions or failover).
var errNoChart = errors.New("no load workload was measured: nothing to chart")

// writeChart draws results.png: for every load workload, one bar per system
// — throughput on top, p50 latency below — on logarithmic axes, since the
// systems differ by orders of magnitude. Each system has its own hue, darker
// for more nodes; the legend stands to the right of both panels.
func writeChart(path string, rep *Report, widthCm, heightCm float64) error {
	var wls []string
	for _, wl := range orderedWorkloads(rep.Workloads, rep.Results) {
		rows := sortedRows(rep.Results, wl)
		if len(rows) > 0 && (Workload{Kind: rows[0].Kind}).isLoad() && anyMeasured(rows) {
			wls = append(wls, wl)
		}
	}
	// Systems with at least one measured load figure, in table order.
	var systems []Result // one representative row per system, for its label and colour
	for _, wl := range wls {
		for _, r := range sortedRows(rep.Results, wl) {
			if r.measured() && !slices.ContainsFunc(systems, func(x Result) bool { return x.Label() == r.Label() }) {
				systems = append(systems, r)
			}
		}
	}
	if len(wls) == 0 || len(systems) == 0 {
		return errNoChart
	}
	// Bars of one system side by side, ours first.
	slices.SortStableFunc(systems, func(a, b Result) int {
		if d := slices.Index(allSystems, a.System) - slices.Index(allSystems, b.System); d != 0 {
			return d
		}
		return a.Nodes - b.Nodes
	})
	w, h := vg.Length(widthCm)*vg.Centimeter, vg.Length(heightCm)*vg.Centimeter
	const legendWidth = 3 * vg.Centimeter
	// Bars share the width one workload gets on the x axis (the plot is the
	// image less the legend and ~2.5 cm of axis).
	perWorkload := (w - legendWidth - 2.5*vg.Centimeter) / vg.Length(len(wls))
	barWidth := max(vg.Points(1), perWorkload*0.8/vg.Length(len(systems)))

	legend := plot.NewLegend()
	legend.Top, legend.Left = true, true
	thr, err := barPlot("throughput (operations/s, log scale)", wls, systems, rep.Results, barWidth, &legend,
		func(r Result) float64 { return r.Throughput })
	if err != nil {
		return err
	}
	lat, err := barPlot("p50 latency (ms, log scale)", wls, systems, rep.Results, barWidth, nil,
		func(r Result) float64 { return r.P50Ms })
	if err != nil {
		return err
	}
	thr.Title.Text = "chubbybench: our cell (chubby) vs etcd, ZooKeeper, Redis — same machine, same run"
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))
	dc := draw.New(img)
	plots := draw.Crop(dc, 0, -legendWidth, 0, 0)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2,
		PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2, PadY: vg.Millimeter * 4}
	canvases := plot.Align([][]*plot.Plot{{thr}, {lat}}, tiles, plots)
	thr.Draw(canvases[0][0])
	lat.Draw(canvases[1][0])
	legend.Draw(draw.Crop(dc, w-legendWidth, 0, 0, -vg.Centimeter))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// systemColor gives each system its hue (ours blue, etcd orange,
// ZooKeeper green, Redis red), darker for more nodes.
func systemColor(system string, nodes int) color.Color {
	shades := map[string][3]color.RGBA{
		sysChubby:    {{0x6b, 0xae, 0xd6, 0xff}, {0x21, 0x71, 0xb5, 0xff}, {0x08, 0x30, 0x6b, 0xff}},
		sysEtcd:      {{0xfd, 0xae, 0x6b, 0xff}, {0xe6, 0x55, 0x0d, 0xff}, {0x8c, 0x2d, 0x04, 0xff}},
		sysZooKeeper: {{0x74, 0xc4, 0x76, 0xff}, {0x23, 0x8b, 0x45, 0xff}, {0x00, 0x44, 0x1b, 0xff}},
		sysRedis:     {{0xfb, 0x6a, 0x4a, 0xff}, {0xcb, 0x18, 0x1d, 0xff}, {0x67, 0x00, 0x0d, 0xff}},
	}
	s, ok := shades[system]
	if !ok {
		return color.Gray{Y: 0x80}
	}
	switch {
	case nodes >= 5:
		return s[2]
	case nodes >= 3:
		return s[1]
	default:
		return s[0]
	}
}

func anyMeasured(rows []Result) bool {
	for _, r := range rows {
		if r.measured() {
			return true
		}
	}
	return false
}

func contains(ss []string, s string) bool { return slices.Contains(ss, s) }

// barPlot groups one bar per system at each workload on a log axis. gonum's
// bars grow from 0, so values are drawn as log10(v) - base, base being the
// lowest decade shown, and the ticks are labelled with the real values.
// Systems are added to legend when it is not nil.
func barPlot(ylabel string, wls []string, systems, results []Result, width vg.Length, legend *plot.Legend, value func(Result) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = ylabel
	p.X.Tick.Label.Rotation = math.Pi / 8
	p.X.Tick.Label.XAlign = draw.XRight
	p.X.Tick.Label.YAlign = draw.YCenter

	logs := make([][]float64, len(systems)) // NaN: no figure
	lo, hi := math.Inf(1), math.Inf(-1)
	for si, sys := range systems {
		logs[si] = make([]float64, len(wls))
		for wi, wl := range wls {
			logs[si][wi] = math.NaN()
			for _, r := range results {
				if r.Workload == wl && r.Label() == sys.Label() && r.measured() {
					if v := value(r); v > 0 {
						lv := math.Log10(v)
						logs[si][wi] = lv
						lo, hi = math.Min(lo, lv), math.Max(hi, lv)
					}
				}
			}
		}
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0, 1
	}
	base, top := math.Floor(lo), math.Ceil(hi)
	if top <= base {
		top = base + 1
	}

	n := len(systems)
	for si, sys := range systems {
		vals := make(plotter.Values, len(wls))
		for wi, lv := range logs[si] {
			if !math.IsNaN(lv) {
				vals[wi] = lv - base
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("bar chart: %w", err)
		}
		bars.LineStyle.Width = 0
		bars.Color = systemColor(sys.System, sys.Nodes)
		bars.Offset = width * vg.Length(float64(si)-float64(n-1)/2)
		p.Add(bars)
		if legend != nil {
			legend.Add(sys.Label(), bars)
		}
	}
	p.NominalX(wls...)
	p.Y.Min, p.Y.Max = 0, top-base
	var ticks []plot.Tick
	for d := base; d <= top; d++ {
		ticks = append(ticks, plot.Tick{Value: d - base, Label: decadeLabel(d)})
	}
	p.Y.Tick.Marker = plot.ConstantTicks(ticks)
	p.Add(plotter.NewGrid())
	return p, nil
}

// decadeLabel labels 10^d: 0.01, 0.1, 1, 10, 100, 1k, 10k, 100k, 1M.
func decadeLabel(d float64) string {
	v := math.Pow(10, d)
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
