package table

import (
	"strconv"
	"time"
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

// cacheKey is the key of what was learnt of the object at uri with the given
// identity: the entry is found again only while the object has that
// identity, so a changed object is a miss, never a stale hit.
func cacheKey(kind, uri string, size int64, modTime time.Time, etag string) string {
	return kind + "\x00" + uri + "\x00" + strconv.FormatInt(size, 10) + "\x00" +
		strconv.FormatInt(modTime.UnixNano(), 10) + "\x00" + etag
}

// factKey is the key of a fact learnt about the store at storeURI (a URI
// without a path: scheme, bucket and endpoint).
func factKey(fact, storeURI string) string {
	return "fact\x00" + fact + "\x00" + storeURI
}
