package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/seed04fbb902/weir/engine"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
)

// progressDisplay shows the backfill jobs: a bar per job on a terminal (mpb), or a
// plain line per job every few seconds otherwise.
type progressDisplay struct {
	mode  string // bars, lines or none
	w     io.Writer
	p     *mpb.Progress
	bars  map[string]*mpb.Bar
	text  map[string]*atomic.Pointer[string] // each bar's right-hand text (read by mpb's goroutine)
	last  time.Time
	every time.Duration
}

// newProgressDisplay picks the display: mode "auto" gives bars when w is a terminal.
func newProgressDisplay(mode string, w io.Writer) *progressDisplay {
	if mode == "auto" {
		mode = "lines"
		if f, ok := w.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
			mode = "bars"
		}
	}
	d := &progressDisplay{mode: mode, w: w, bars: map[string]*mpb.Bar{}, text: map[string]*atomic.Pointer[string]{}, every: 3 * time.Second}
	if mode == "bars" {
		d.p = mpb.New(mpb.WithOutput(w), mpb.WithRefreshRate(150*time.Millisecond), mpb.WithWidth(40))
	}
	return d
}

// jobText is a job's progress in words: rows consumed of the estimate, vnodes, rate, ETA.
func jobText(p engine.JobProgress) string {
	eta := "-"
	switch {
	case p.Done:
		eta = "done"
	case p.Paused:
		eta = "paused"
	case p.RowsPerSecond > 0 && p.UpstreamRows > p.RowsConsumed:
		eta = (time.Duration(float64(p.UpstreamRows-p.RowsConsumed)/p.RowsPerSecond) * time.Second).Round(time.Second).String()
	}
	return fmt.Sprintf("%d of ~%d rows, vnodes %d/%d, %.0f rows/s, ETA %s", p.RowsConsumed, p.UpstreamRows, p.VnodesCompleted, p.VnodesTotal, p.RowsPerSecond, eta)
}

// update shows the jobs' progress.
func (d *progressDisplay) update(ps []engine.JobProgress) {
	switch d.mode {
	case "bars":
		for _, p := range ps {
			b, ok := d.bars[p.Name]
			if !ok {
				text := &atomic.Pointer[string]{}
				text.Store(new(string))
				b = d.p.New(1000, mpb.BarStyle(),
					mpb.PrependDecorators(decor.Name(fmt.Sprintf("%-4s", p.Name)), decor.Percentage(decor.WC{W: 5})),
					mpb.AppendDecorators(decor.Any(func(decor.Statistics) string { return *text.Load() })))
				d.bars[p.Name], d.text[p.Name] = b, text
			}
			t := jobText(p)
			d.text[p.Name].Store(&t)
			if p.Done {
				b.SetCurrent(1000)
				b.SetTotal(1000, true)
			} else {
				b.SetCurrent(int64(p.Percent * 10))
			}
		}
	case "lines":
		if time.Since(d.last) < d.every {
			return
		}
		d.last = time.Now()
		var b strings.Builder
		for _, p := range ps {
			fmt.Fprintf(&b, "progress %-4s %5.1f%%  %s\n", p.Name, p.Percent, jobText(p))
		}
		io.WriteString(d.w, b.String())
	}
}

// note prints a line about what the demo just did.
func (d *progressDisplay) note(what string) {
	switch d.mode {
	case "bars":
		fmt.Fprintf(d.p, "demo: %s\n", what)
	case "lines":
		fmt.Fprintf(d.w, "demo: %s\n", what)
	}
}

// done completes the display: every bar at 100%.
func (d *progressDisplay) done() {
	if d.mode == "bars" {
		for _, b := range d.bars {
			b.SetTotal(1000, true)
		}
		d.p.Wait()
	}
}
