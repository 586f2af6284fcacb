package permutation

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
