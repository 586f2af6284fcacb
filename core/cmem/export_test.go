package cmem

// SpareBytes returns the bytes of the freed mappings a keeps for reuse.
func (a *Allocator) SpareBytes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.spareN
}

// NewWithoutSpares returns an allocator that keeps no freed mapping: every
// large buffer is mapped afresh, as before mappings were reused.
func NewWithoutSpares() *Allocator {
	a := New()
	a.spareLimit = 0
	return a
}
