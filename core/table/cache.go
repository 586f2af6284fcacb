package table

import (
	"strconv"

	"github.com/croupier-data/croupier/core/store"
)

// A Cache keeps, between opens and between the processes of a host, what
// reading a table learns that cannot change while the object it came from
// keeps its identity (Parquet footers, version manifests), and facts learnt
// about stores (that one honours conditional writes), by key. Get returns
// nil where a key is absent; Put is best effort: a cache that fails is a
// cache that misses, never an error. core/catalog's Catalog, a file on the
// host, is croupier's (the C library and the croupier command use it); a
// nil Cache caches nothing.
//
// Table takes the interface rather than *catalog.Catalog so that a program
// that reads tables links no catalog it does not use.
type Cache interface {
	Get(keys []string) [][]byte
	Put(keys []string, values [][]byte)
}

// cacheKey is the key of what was learnt of the version obj of the object
// at uri: the entry is found again only while the object has all of obj's
// identity (size, modification time to the nanosecond, ETag, generation,
// inode), so a changed object is a miss, never a stale hit. A file replaced
// by another of the same size and modification time (cp -p, rsync -t) has
// a new inode.
func cacheKey(kind, uri string, obj store.Object) string {
	var mod int64
	if !obj.ModTime.IsZero() {
		mod = obj.ModTime.UnixNano()
	}
	return kind + "\x00" + uri + "\x00" + strconv.FormatInt(obj.Size, 10) + "\x00" +
		strconv.FormatInt(mod, 10) + "\x00" + obj.ETag + "\x00" +
		strconv.FormatInt(obj.Generation, 10) + "\x00" + strconv.FormatUint(obj.Inode, 10)
}

// cacheable reports whether a catalog may hold what was learnt of obj: only
// when obj names one version, by an ETag, a generation or an inode. An
// object known by its size and modification time alone (a listing of some
// stores) could be another version of that size written within the
// store's clock resolution.
func cacheable(obj store.Object) bool {
	return obj.ETag != "" || obj.Generation != 0 || obj.Inode != 0
}

// factKey is the key of a fact learnt about the store at storeURI (a URI
// without a path: scheme, bucket and endpoint).
func factKey(fact, storeURI string) string {
	return "fact\x00" + fact + "\x00" + storeURI
}
