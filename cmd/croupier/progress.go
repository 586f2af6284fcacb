package main

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/croupier-data/croupier/permutation"
)

// progress reports a build's progress on w: a line redrawn in place on a
// terminal, else a plain line per phase and per tenth of the work.
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

// update is a permutation.BuildOptions.Progress callback.
func (p *progress) update(pr permutation.Progress) {
	newPhase := pr.Phase != p.phase
	if newPhase && p.phase != "" && p.terminal {
		fmt.Fprintln(p.w)
	}
	if newPhase {
		p.phase, p.tenth = pr.Phase, -1
	}
	pct := int64(100)
	if pr.Total > 0 {
		pct = pr.Done * 100 / pr.Total
	}
	if p.terminal {
		now := time.Now()
		if !newPhase && pr.Done < pr.Total && now.Sub(p.last) < 100*time.Millisecond {
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
		fmt.Fprintf(p.w, "\r%-5s [%s] %3d%% %d/%d", pr.Phase, bar, pct, pr.Done, pr.Total)
		return
	}
	if t := pct / 10; t > p.tenth {
		p.tenth = t
		fmt.Fprintf(p.w, "%s: %d/%d (%d%%)\n", pr.Phase, pr.Done, pr.Total, pct)
	}
}

// done ends a redrawn line.
func (p *progress) done() {
	if p.terminal && p.phase != "" {
		fmt.Fprintln(p.w)
	}
}
