package simulate

import (
	"bytes"
	"fmt"
	"image/color"
	"io"
	"math"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// ChartOptions tune WriteChart.
type ChartOptions struct {
	// Bin is the width of the bars that count requests; 0 picks a round
	// width near a tenth of the shortest rule window (at most 400 bars).
	Bin time.Duration
	// Title is printed above the panels; "" uses the traffic's name.
	Title string
}

// Chart formats.
const (
	SVG = "svg"
	PNG = "png"
)

// Colours of the series (Okabe–Ito, readable with colour blindness).
var (
	colOffered = color.RGBA{R: 0xcc, G: 0xcc, B: 0xcc, A: 0xff}
	colAdmit   = color.RGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff}
	colServed  = color.RGBA{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff}
	colEdge    = color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff}
	colBroken  = color.RGBA{R: 0xc0, G: 0x00, B: 0x00, A: 0xff}
	// procColors are the admitted series of each process of a leased rule.
	procColors = []color.Color{
		color.RGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff},
		color.RGBA{R: 0xcc, G: 0x79, B: 0xa7, A: 0xff},
		color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff},
		color.RGBA{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff},
		color.RGBA{R: 0x99, G: 0x99, B: 0x33, A: 0xff},
		color.RGBA{R: 0x88, G: 0x22, B: 0x55, A: 0xff},
	}
)

// Chart sizes.
const (
	chartWidth  = 9 * vg.Inch
	panelHeight = 2.1 * vg.Inch
	headHeight  = 0.45 * vg.Inch
	pngDPI      = 110
)

// WriteChart draws rep as a chart in format (SVG or PNG) to w: for each rule
// a panel of the requests offered and admitted per bin over time (and, when
// some were delayed, when they are served), with the rule's window edges
// (epoch-aligned multiples of its window) as dashed vertical lines. Every
// panel has the same scales, so panels compare at a glance.
func WriteChart(w io.Writer, rep *Report, format string, opt ChartOptions) error {
	if len(rep.Rules) == 0 {
		return fmt.Errorf("simulate: nothing to chart")
	}
	tr := rep.Traffic
	start, end := tr.Start.UnixMicro(), tr.End.UnixMicro()
	span := end - start
	bin := int64(opt.Bin / time.Microsecond)
	if bin <= 0 {
		shortest := rep.Rules[0].Window
		for _, r := range rep.Rules {
			shortest = min(shortest, r.Window)
		}
		bin = niceBin(max(int64(shortest/time.Microsecond)/10, (span+399)/400))
	}
	if span/bin > 5000 {
		return fmt.Errorf("simulate: a bin of %v makes %d bars over %v; choose a wider bin", time.Duration(bin)*time.Microsecond, span/bin, time.Duration(span)*time.Microsecond)
	}
	unit, unitName := xUnit(span)
	offered := histogram(tr.Times, start, end, bin)
	top := 1.0
	for _, c := range offered {
		top = max(top, c)
	}

	fnt := font.Font{Typeface: "Liberation", Variant: "Sans"}
	plots := make([][]*plot.Plot, len(rep.Rules))
	for i, rr := range rep.Rules {
		p := plot.New()
		sans(p, fnt)
		p.Title.Text = panelTitle(rr)
		p.Title.TextStyle.Font.Size = 9.5
		if !rr.Held() {
			p.Title.TextStyle.Color = colBroken
		}
		p.X.Min, p.X.Max = 0, float64(span)/unit
		p.Y.Min, p.Y.Max = 0, math.Ceil(top*1.3)
		p.Y.Label.Text = "requests per " + fmtDur(time.Duration(bin)*time.Microsecond)
		p.Y.Label.TextStyle.Font.Size = 9
		if i == len(rep.Rules)-1 {
			p.X.Label.Text = fmt.Sprintf("%s since %s", unitName, tr.Start.UTC().Format(time.RFC3339))
		}
		p.Add(plotter.NewGrid())
		p.Add(stepLine(offered, bin, unit, colOffered, true, nil))
		admitted := stepLine(histogram(rr.admitted, start, end, bin), bin, unit, colAdmit, false, nil)
		served := (*plotter.Line)(nil)
		if rr.served != nil {
			served = stepLine(histogram(rr.served, start, end, bin), bin, unit, colServed, false, []vg.Length{vg.Points(3), vg.Points(2)})
			p.Add(served)
		}
		p.Add(admitted)
		var procLines []*plotter.Line
		for j, ts := range rr.byProc {
			l := stepLine(histogram(ts, start, end, bin), bin, unit, procColors[j%len(procColors)], false, []vg.Length{vg.Points(2), vg.Points(1.5)})
			p.Add(l)
			procLines = append(procLines, l)
		}
		ed := windowEdges(start, end, int64(rr.Window/time.Microsecond), unit)
		if ed != nil {
			p.Add(ed)
		}
		// The first panel explains every series; the others only what is theirs.
		p.Legend.Top = true
		p.Legend.XOffs = -vg.Points(14)
		p.Legend.TextStyle.Font = font.From(fnt, 8)
		p.Legend.ThumbnailWidth = vg.Points(14)
		if i == 0 {
			p.Legend.Add("offered", plotterThumb{colOffered, true, nil})
			p.Legend.Add("admitted", admitted)
		}
		if served != nil {
			p.Legend.Add("served (after Delay)", served)
		}
		for j, l := range procLines {
			if j < 4 || j == len(procLines)-1 {
				p.Legend.Add(fmt.Sprintf("process %d", j+1), l)
			}
		}
		if ed != nil && (i == 0 || rr.Window != rep.Rules[0].Window) {
			p.Legend.Add(fmt.Sprintf("%v window edge", fmtDur(rr.Window)), ed)
		}
		plots[i] = []*plot.Plot{p}
	}

	height := headHeight + vg.Length(len(plots))*panelHeight
	var (
		canvas vg.CanvasWriterTo
		dc     draw.Canvas
	)
	switch format {
	case SVG:
		c := vgsvg.New(chartWidth, height)
		canvas, dc = c, draw.New(c)
	case PNG:
		c := vgimg.NewWith(vgimg.UseWH(chartWidth, height), vgimg.UseDPI(pngDPI))
		canvas, dc = vgimg.PngCanvas{Canvas: c}, draw.New(c)
	default:
		return fmt.Errorf("simulate: unknown chart format %q (want svg or png)", format)
	}
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())

	title := opt.Title
	if title == "" {
		title = tr.Name
	}
	head := text.Style{Color: color.Black, Font: font.From(fnt, 12), XAlign: draw.XLeft, YAlign: draw.YTop, Handler: plot.DefaultTextHandler}
	dc.FillText(head, vg.Point{X: vg.Points(10), Y: height - vg.Points(8)}, title)

	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: headHeight, PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(12), PadY: vg.Points(10)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	if format == PNG {
		_, err := canvas.WriteTo(w)
		return err
	}
	// vgsvg names the font without a fallback; Arial and Helvetica have the
	// metrics of Liberation Sans, so the layout holds where it is missing.
	var buf bytes.Buffer
	if _, err := canvas.WriteTo(&buf); err != nil {
		return err
	}
	_, err := w.Write(bytes.ReplaceAll(buf.Bytes(), []byte("font-family:Liberation Sans;"), []byte("font-family:'Liberation Sans',Arial,Helvetica,sans-serif;")))
	return err
}

// panelTitle sums up a rule's outcome in one line.
func panelTitle(rr *RuleReport) string {
	var b strings.Builder
	if rr.Processes > 0 {
		fmt.Fprintf(&b, "%s — admitted %d of %d (exactly %d without leases)", rr.Name, rr.Admitted, rr.Offered, rr.Exact)
		if rr.Held() {
			b.WriteString(", bound held")
		} else {
			b.WriteString(", BOUND BROKEN")
		}
		return b.String()
	}
	if rr.Name != rr.Algorithm {
		b.WriteString(rr.Name + ": ")
	}
	b.WriteString(rr.Params)
	fmt.Fprintf(&b, " — admitted %d of %d, most %d per %v", rr.Admitted, rr.Offered, rr.MostInWindow, fmtDur(rr.Window))
	if rr.MaxDelay > 0 {
		fmt.Fprintf(&b, ", delays ≤ %v", fmtDur(rr.MaxDelay))
	}
	if rr.Held() {
		b.WriteString(", bound held")
	} else {
		for _, c := range rr.Checks {
			if !c.Held {
				fmt.Fprintf(&b, ", BOUND BROKEN: %d > %d", c.Observed, c.Allowed)
				break
			}
		}
	}
	return b.String()
}

// sans sets every text of p in the sans-serif face, keeping sizes.
func sans(p *plot.Plot, f font.Font) {
	for _, s := range []*text.Style{&p.Title.TextStyle, &p.X.Label.TextStyle, &p.Y.Label.TextStyle, &p.X.Tick.Label, &p.Y.Tick.Label, &p.Legend.TextStyle} {
		s.Font = font.From(f, s.Font.Size)
	}
	p.X.Tick.Label.Font.Size = 8
	p.Y.Tick.Label.Font.Size = 8
	p.X.Label.TextStyle.Font.Size = 9
}

// histogram counts times in bins of width bin from start; the last bin ends at end or after.
func histogram(times []int64, start, end, bin int64) []float64 {
	n := max((end-start+bin-1)/bin, 1)
	out := make([]float64, n)
	for _, t := range times {
		if i := (t - start) / bin; i >= 0 && i < n {
			out[i]++
		}
	}
	return out
}

// stepLine draws counts per bin as a staircase, filled when fill is set.
func stepLine(counts []float64, bin int64, unit float64, c color.Color, fill bool, dashes []vg.Length) *plotter.Line {
	xys := make(plotter.XYs, 0, len(counts)+1)
	for i, v := range counts {
		xys = append(xys, plotter.XY{X: float64(int64(i)*bin) / unit, Y: v})
	}
	xys = append(xys, plotter.XY{X: float64(int64(len(counts))*bin) / unit, Y: counts[len(counts)-1]})
	l := &plotter.Line{XYs: xys, StepStyle: plotter.PostStep}
	l.LineStyle = draw.LineStyle{Color: c, Width: vg.Points(1.3), Dashes: dashes}
	if fill {
		l.FillColor = c
		l.LineStyle.Width = 0
	}
	return l
}

// plotterThumb is a legend swatch: a filled box or a line.
type plotterThumb struct {
	c      color.Color
	fill   bool
	dashes []vg.Length
}

func (t plotterThumb) Thumbnail(c *draw.Canvas) {
	if t.fill {
		c.FillPolygon(t.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y}})
		return
	}
	y := (c.Min.Y + c.Max.Y) / 2
	c.StrokeLine2(draw.LineStyle{Color: t.c, Width: vg.Points(1.3), Dashes: t.dashes}, c.Min.X, y, c.Max.X, y)
}

// edges draws vertical lines at the window edges across the data area.
type edges struct {
	xs    []float64
	style draw.LineStyle
}

// maxEdges is the most window edges drawn; with more, none are.
const maxEdges = 200

// windowEdges returns the edges of epoch-aligned windows of length w
// (µs) in [start, end], or nil when there are none or too many to show.
func windowEdges(start, end, w int64, unit float64) *edges {
	if w <= 0 || (end-start)/w > maxEdges {
		return nil
	}
	first := (start + w - 1) / w * w
	e := &edges{style: draw.LineStyle{Color: colEdge, Width: vg.Points(0.8), Dashes: []vg.Length{vg.Points(4), vg.Points(3)}}}
	for t := first; t <= end; t += w {
		e.xs = append(e.xs, float64(t-start)/unit)
	}
	if len(e.xs) == 0 {
		return nil
	}
	return e
}

func (e *edges) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	for _, x := range e.xs {
		if x < p.X.Min || x > p.X.Max {
			continue
		}
		c.StrokeLine2(e.style, trX(x), c.Min.Y, trX(x), c.Max.Y)
	}
}

func (e *edges) Thumbnail(c *draw.Canvas) {
	x := (c.Min.X + c.Max.X) / 2
	c.StrokeLine2(e.style, x, c.Min.Y, x, c.Max.Y)
}

// niceBin rounds a bin width (µs) up to 1, 2 or 5 times a power of ten below
// a second, or to a round number of seconds, minutes, hours or days.
func niceBin(us int64) int64 {
	us = max(us, 1)
	if us <= 1e6 {
		for p := int64(1); ; p *= 10 {
			for _, m := range []int64{1, 2, 5} {
				if m*p >= us {
					return m * p
				}
			}
		}
	}
	const s, m, h, d = int64(1e6), 60 * int64(1e6), 3600 * int64(1e6), 86400 * int64(1e6)
	for _, v := range []int64{2 * s, 5 * s, 10 * s, 15 * s, 30 * s, m, 2 * m, 5 * m, 10 * m, 15 * m, 30 * m, h, 2 * h, 3 * h, 6 * h, 12 * h, d} {
		if v >= us {
			return v
		}
	}
	for p := d; ; p *= 10 {
		for _, k := range []int64{1, 2, 5} {
			if k*p >= us || k*p > math.MaxInt64/20 {
				return k * p
			}
		}
	}
}

// xUnit picks the unit of the time axis for a span (µs): its length in µs and name.
func xUnit(span int64) (float64, string) {
	switch {
	case span <= 10*60*1e6:
		return 1e6, "seconds"
	case span <= 10*3600*1e6:
		return 60e6, "minutes"
	case span <= 10*86400*1e6:
		return 3600e6, "hours"
	}
	return 86400e6, "days"
}

// FormatDuration writes a duration without zero parts: 1m rather than 1m0s.
func FormatDuration(d time.Duration) string { return fmtDur(d) }

func fmtDur(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
