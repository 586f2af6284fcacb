package loader

// workerSteps returns the steps of [start, end) that worker w of k deals
// when the workers take turns at runs of r consecutive steps: the epoch from
// start is cut into runs [start + i·r, start + (i+1)·r), the last clipped to
// end, and worker w deals runs w, w+k, w+2k, … With r = 1 it deals start+w,
// start+w+k, …, torch's round robin. It needs 0 ≤ w < k, r ≥ 1 and
// start ≥ −w, and does not overflow for any such k and r.
func workerSteps(start, end int64, w, k, r int64) []int64 {
	if end <= start {
		return nil
	}
	runs := (end-start-1)/r + 1 // the runs that begin before end
	var steps []int64
	// A stride of k runs or more leaves the worker only run w; capping it
	// at runs keeps run+stride from overflowing.
	for run := w; run < runs; run += min(k, runs) {
		first := start + run*r // run < runs, so run·r < end − start
		for t := first; t < first+min(r, end-first); t++ {
			steps = append(steps, t)
		}
	}
	return steps
}
