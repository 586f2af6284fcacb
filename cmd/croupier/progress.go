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
	phase    string
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

// update reports that done of the total units of work of phase are done.
func (p *progress) update(phase string, done, total int64) {
	newPhase := phase != p.phase
	if newPhase && p.phase != "" && p.terminal {
		fmt.Fprintln(p.w)
	}
	if newPhase {
		p.phase, p.tenth = phase, -1
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
		fmt.Fprintf(p.w, "\r%-5s [%s] %3d%% %d/%d", phase, bar, pct, done, total)
		return
	}
	if t := pct / 10; t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "%s: %d/%d (%d%%)\n", phase, done, total, pct)
	}
}

// done ends a redrawn line.
func (p *progress) done() {
	if p.terminal && p.phase != "" {
		fmt.Fprintln(p.w)
	}
}
