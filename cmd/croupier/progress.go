package main

import (
	"fmt"
	"io"
	"os"
	"time"
)

// progress reports a long command's progress on w: a line redrawn in place on
// a terminal, else a plain line per phase and per tenth of the work.
type progress struct {
	w        io.Writer
	terminal bool
	eta      bool // whether to estimate the time a phase has left
	phase    string
	started  time.Time // when the phase started
	last     time.Time
	tenth    int64 // last tenth printed, on a non-terminal
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.terminal = true
		}
	}
	return p
}

// update reports that done of the total units of work of phase are done;
// note, when not empty, follows.
func (p *progress) update(phase string, done, total int64, note string) {
	newPhase := phase != p.phase
	if newPhase && p.phase != "" && p.terminal {
		fmt.Fprintln(p.w)
	}
	if newPhase {
		p.phase, p.tenth, p.started = phase, -1, time.Now()
	}
	if note != "" {
		note = ", " + note
	}
	if p.eta && done > 0 && done < total {
		left := time.Duration(float64(time.Since(p.started)) * float64(total-done) / float64(done))
		note += ", " + left.Round(time.Second).String() + " left"
	}
	pct := int64(100)
	if total > 0 {
		pct = done * 100 / total
	}
	if p.terminal {
		now := time.Now()
		if !newPhase && done < total && now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		p.last = now
		const width = 30
		n := int(pct * width / 100)
		bar := make([]byte, width)
		for i := range bar {
			bar[i] = ' '
			if i < n {
				bar[i] = '='
			}
		}
		fmt.Fprintf(p.w, "\r%-5s [%s] %3d%% %d/%d%s\x1b[K", phase, bar, pct, done, total, note)
		return
	}
	if t := pct / 10; t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "%s: %d/%d (%d%%)%s\n", phase, done, total, pct, note)
	}
}

// done ends a redrawn line.
func (p *progress) done() {
	if p.terminal && p.phase != "" {
		fmt.Fprintln(p.w)
	}
}
