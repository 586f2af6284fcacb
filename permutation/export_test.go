package permutation

import "time"

// SetBuckets makes buckets of at most ids row ids and spill objects of at
// most objectBytes bytes, and calls held with the most records a build's
// ordering holds in one slice, until the returned function restores them.
func SetBuckets(ids int64, objectBytes int, held func(int64)) (restore func()) {
	ids0, obj0, built0 := bucketIDs, maxSpillObject, built
	bucketIDs, maxSpillObject, built = ids, objectBytes, held
	return func() { bucketIDs, maxSpillObject, built = ids0, obj0, built0 }
}

// SetWideIDs makes builds persist 8-byte row ids whatever the table's size,
// until the returned function restores it.
func SetWideIDs() (restore func()) {
	n := narrowRows
	narrowRows = -1
	return func() { narrowRows = n }
}

// SetRankFault makes step step of rank rank of distributed builds fail with
// err, until the returned function restores them.
func SetRankFault(rank, step int, err error) (restore func()) {
	rankFault = func(r, s int) error {
		if r == rank && s == step {
			return err
		}
		return nil
	}
	return func() { rankFault = nil }
}

// SetLease makes ranks renew their spill leases every renew and builds take
// a spill none of whose objects was written for stale for a dead build's,
// until the returned function restores them.
func SetLease(renew, stale time.Duration) (restore func()) {
	r, s := leaseRenew, spillStale
	leaseRenew, spillStale = renew, stale
	return func() { leaseRenew, spillStale = r, s }
}
