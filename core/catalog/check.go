package catalog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// What bbolt (v1.5) writes, as far as checking a file needs: every page
// starts with a header (id uint64, flags uint16, count uint16, overflow
// uint32); pages 0 and 1 hold a meta record each (magic, version, page size,
// flags, the root bucket's root page and sequence, the freelist's page, the
// high-water page id, the transaction id, and an FNV-64a of those); a branch
// page holds count elements (pos uint32, ksize uint32, child page uint64) and
// a leaf page count elements (flags, pos, ksize, vsize, all uint32), each
// pos counted from its element. A bucket is a leaf value of its parent: its
// root page and sequence, then, when the root is 0, the bucket's own leaf
// page inline. Integers are in the host's byte order.
const (
	boltMagic       = 0xED0CDAED
	boltVersion     = 2
	headerSize      = 16
	metaSize        = 56 // up to the checksum, which follows
	elementSize     = 16
	branchFlag      = 0x01
	leafFlag        = 0x02
	freelistFlag    = 0x10
	bucketLeafFlag  = 0x01
	bucketHeader    = 16
	noFreelist      = ^uint64(0)
	maxDepth        = 64
	minPageSize     = 1024
	maxPageSize     = 1 << 20
	firstPageSearch = 1024 // bbolt looks for meta 1 at 1 KiB × 2^i
)

var order = binary.NativeEndian

// errDamaged marks what shows that the catalog file is damaged: it is then
// set aside and the operation treated as a miss.
var errDamaged = errors.New("damaged catalog file")

// damaged returns an errDamaged that says why.
func damaged(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errDamaged, fmt.Sprintf(format, args...))
}

// errEmpty is an empty file: one that a writer has created and not yet
// initialised, or that was truncated to nothing. Reading it is a miss.
var errEmpty = errors.New("empty catalog file")

// meta is the meta record a transaction would use.
type meta struct {
	pageSize  uint64
	root      uint64 // the root bucket's root page
	freelist  uint64
	highWater uint64 // the first page id past the last page in use
	txid      uint64
}

// readMeta decodes and checks the meta record at off of f.
func readMeta(f io.ReaderAt, off int64) (meta, bool) {
	var b [headerSize + metaSize + 8]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		return meta{}, false
	}
	m := b[headerSize:]
	h := fnv.New64a()
	h.Write(m[:metaSize])
	if order.Uint32(m[0:]) != boltMagic || order.Uint32(m[4:]) != boltVersion ||
		order.Uint64(m[metaSize:]) != h.Sum64() {
		return meta{}, false
	}
	return meta{pageSize: uint64(order.Uint32(m[8:])), root: order.Uint64(m[16:]), freelist: order.Uint64(m[32:]),
		highWater: order.Uint64(m[40:]), txid: order.Uint64(m[48:])}, true
}

// fileCheck checks, before bbolt maps the file, every page that an
// operation's bbolt calls will read: the meta record bbolt will choose (and
// that the file holds every page below its high-water mark), for writes the
// freelist, and the path from the root to each key of scope, or the whole
// bucket. bbolt trusts its pages: a page past the end of the file faults
// when read through the map (SIGBUS), and a child pointer that leads back up
// the tree recurses until the stack overflows, neither of which a program
// can recover from.
type fileCheck struct {
	f     io.ReaderAt
	size  uint64
	m     meta
	pages map[uint64][]byte // pages read
	nodes map[nodeID]node   // pages checked as nodes of a bucket's tree
}

type nodeID struct {
	page   uint64
	bucket string
}

// checkFile checks f, of size bytes, for an operation on scope.
func checkFile(f io.ReaderAt, size int64, write bool, sc scope) error {
	if size == 0 {
		return errEmpty
	}
	m0, ok0 := readMeta(f, 0)
	var m1 meta
	ok1 := false
	if ok0 {
		m1, ok1 = readMeta(f, int64(m0.pageSize))
	} else {
		// As bbolt: the first valid meta record at 1 KiB × 2^i.
		for ps := int64(firstPageSearch); ps <= maxPageSize && !ok1; ps *= 2 {
			if m1, ok1 = readMeta(f, ps); ok1 && m1.pageSize != uint64(ps) {
				return damaged("meta page 1 at %d says pages are %d bytes", ps, m1.pageSize)
			}
		}
	}
	// bbolt uses the valid meta record with the higher transaction id.
	m := m0
	switch {
	case !ok0 && !ok1:
		return damaged("no valid meta page")
	case !ok0 || ok1 && m1.txid > m0.txid:
		m = m1
	}
	c := &fileCheck{f: f, size: uint64(size), m: m, pages: map[uint64][]byte{}, nodes: map[nodeID]node{}}
	switch ps := m.pageSize; {
	case ps < minPageSize || ps > maxPageSize || ps&(ps-1) != 0:
		return damaged("page size %d", ps)
	case m.highWater < 4 || m.highWater > c.size/ps:
		return damaged("%d pages in use, %d bytes hold %d", m.highWater, size, c.size/ps)
	case m.root < 2 || m.root >= m.highWater:
		return damaged("root page %d of %d", m.root, m.highWater)
	case m.freelist < 2 || m.freelist >= m.highWater:
		return damaged("freelist page %d of %d", m.freelist, m.highWater)
	}
	if write {
		if err := c.freelist(); err != nil {
			return err
		}
	}
	bucket, flags, found, err := c.lookup(nil, m.root, sc.bucket)
	switch {
	case err != nil || !found:
		return err
	case flags&bucketLeafFlag == 0:
		return damaged("%q is not a bucket", sc.bucket)
	}
	return c.bucket(bucket, sc)
}

// page returns page id, whole (with its overflow pages), checking that it
// lies below the high-water mark and says it is page id.
func (c *fileCheck) page(id uint64) ([]byte, error) {
	if p, ok := c.pages[id]; ok {
		return p, nil
	}
	ps := c.m.pageSize
	if id < 2 || id >= c.m.highWater {
		return nil, damaged("page %d of %d", id, c.m.highWater)
	}
	var h [headerSize]byte
	if _, err := c.f.ReadAt(h[:], int64(id*ps)); err != nil {
		return nil, damaged("page %d: %v", id, err)
	}
	overflow := uint64(order.Uint32(h[12:]))
	if order.Uint64(h[0:]) != id || overflow >= c.m.highWater-id {
		return nil, damaged("page %d: header says page %d, %d overflow pages", id, order.Uint64(h[0:]), overflow)
	}
	p := make([]byte, (overflow+1)*ps)
	if _, err := c.f.ReadAt(p, int64(id*ps)); err != nil {
		return nil, damaged("page %d: %v", id, err)
	}
	c.pages[id] = p
	return p, nil
}

// freelist checks the freelist page: every page it lists is in use range.
func (c *fileCheck) freelist() error {
	p, err := c.page(c.m.freelist)
	if err != nil {
		return err
	}
	if order.Uint16(p[8:]) != freelistFlag {
		return damaged("page %d is not the freelist", c.m.freelist)
	}
	n, data := uint64(order.Uint16(p[10:])), p[headerSize:]
	if n == 0xFFFF {
		n, data = order.Uint64(data), data[8:]
	}
	if n > uint64(len(data))/8 {
		return damaged("freelist of %d pages in %d bytes", n, len(data))
	}
	for i := range n {
		if id := order.Uint64(data[8*i:]); id < 2 || id >= c.m.highWater {
			return damaged("freelist holds page %d of %d", id, c.m.highWater)
		}
	}
	return nil
}

// node is a checked branch or leaf page: its bytes, from its header, and
// whether it is a leaf. An inline bucket's page is a node with id 0.
type node struct {
	b    []byte
	leaf bool
}

// elem returns element i's key, and its value (a leaf's) or child (a
// branch's).
func (n node) elem(i int) (key, value []byte, flags uint32, child uint64) {
	e := n.b[headerSize+i*elementSize:]
	if n.leaf {
		pos, ks, vs := uint64(order.Uint32(e[4:])), uint64(order.Uint32(e[8:])), uint64(order.Uint32(e[12:]))
		k := e[pos : pos+ks]
		return k, e[pos+ks : pos+ks+vs], order.Uint32(e[0:]), 0
	}
	pos, ks := uint64(order.Uint32(e[0:])), uint64(order.Uint32(e[4:]))
	return e[pos : pos+ks], nil, 0, order.Uint64(e[8:])
}

// key returns element i's key.
func (n node) key(i int) []byte {
	k, _, _, _ := n.elem(i)
	return k
}

// count is the number of elements.
func (n node) count() int { return int(order.Uint16(n.b[10:])) }

// checkNode checks that b holds a branch or leaf page whose elements, keys
// and values all lie within it (so that bbolt's binary search and its
// reading of the node stay in the page), whose keys increase, and whose
// children are pages in use. In a sealed bucket (bucket not nil) every
// entry of a leaf must match its seal: a flipped bit in a key, a value or
// an element is found before bbolt reads the page, not only when that
// key is asked for.
func (c *fileCheck) checkNode(b []byte, id uint64, bucket []byte) (node, error) {
	if len(b) < headerSize {
		return node{}, damaged("page %d: %d bytes", id, len(b))
	}
	flags := order.Uint16(b[8:])
	n := node{b: b, leaf: flags == leafFlag}
	if !n.leaf && flags != branchFlag {
		return node{}, damaged("page %d: flags %#x where a branch or leaf page belongs", id, flags)
	}
	count := n.count()
	if !n.leaf && count == 0 || headerSize+count*elementSize > len(b) {
		return node{}, damaged("page %d: %d elements", id, count)
	}
	var prev []byte
	for i := range count {
		off := uint64(headerSize + i*elementSize)
		e := b[off:]
		var end uint64
		if n.leaf {
			end = uint64(order.Uint32(e[4:])) + uint64(order.Uint32(e[8:])) + uint64(order.Uint32(e[12:]))
		} else {
			end = uint64(order.Uint32(e[0:])) + uint64(order.Uint32(e[4:]))
			if child := order.Uint64(e[8:]); child < 2 || child >= c.m.highWater {
				return node{}, damaged("page %d: child page %d of %d", id, child, c.m.highWater)
			}
		}
		if off+end > uint64(len(b)) {
			return node{}, damaged("page %d: element %d ends past the page", id, i)
		}
		k, v, eflags, _ := n.elem(i)
		if i > 0 && bytes.Compare(prev, k) >= 0 {
			return node{}, damaged("page %d: keys out of order at element %d", id, i)
		}
		prev = k
		if n.leaf && bucket != nil {
			if _, err := unseal(bucket, k, v); err != nil || eflags != 0 {
				return node{}, damaged("page %d: element %d (%q in %q) does not match its seal", id, i, k, bucket)
			}
		}
	}
	return n, nil
}

// lookup finds key in the tree of bucket (nil: the root bucket) whose root
// page is root, as bbolt's cursor does, checking every page on the way: a
// child must start with the key its parent holds for it. It returns the
// key's value and flags when the key is there.
func (c *fileCheck) lookup(bucket []byte, root uint64, key []byte) (value []byte, flags uint32, found bool, err error) {
	id, first := root, []byte(nil)
	seen := map[uint64]bool{}
	for depth := 0; ; depth++ {
		if seen[id] || depth > maxDepth {
			return nil, 0, false, damaged("page %d is its own ancestor", id)
		}
		seen[id] = true
		n, err := c.node(id, bucket, first)
		if err != nil {
			return nil, 0, false, err
		}
		i, exact := c.search(n, key)
		if n.leaf {
			if !exact {
				return nil, 0, false, nil
			}
			_, v, flags, _ := n.elem(i)
			return v, flags, true, nil
		}
		if !exact && i > 0 {
			i--
		}
		first, _, _, id = n.elem(i)
	}
}

// node reads and checks page id of bucket's tree; first, when not nil, is
// the key its parent holds for it.
func (c *fileCheck) node(id uint64, bucket, first []byte) (node, error) {
	n, ok := c.nodes[nodeID{id, string(bucket)}]
	if !ok {
		p, err := c.page(id)
		if err != nil {
			return node{}, err
		}
		if n, err = c.checkNode(p, id, bucket); err != nil {
			return node{}, err
		}
		c.nodes[nodeID{id, string(bucket)}] = n
	}
	if first != nil && (n.count() == 0 || !bytes.Equal(n.key(0), first)) {
		return node{}, damaged("page %d does not start with the key its parent holds for it", id)
	}
	return n, nil
}

// search is bbolt's binary search: the first element whose key is not less
// than key, and whether it equals key.
func (c *fileCheck) search(n node, key []byte) (int, bool) {
	lo, hi := 0, n.count()
	exact := false
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		switch bytes.Compare(n.key(mid), key) {
		case -1:
			lo = mid + 1
		case 0:
			exact = true
			fallthrough
		default:
			hi = mid
		}
	}
	return lo, exact
}

// bucket checks the pages of the bucket whose value in its parent is v that
// sc's operation reads: the path to each of its keys, or all of them.
func (c *fileCheck) bucket(v []byte, sc scope) error {
	if len(v) < bucketHeader {
		return damaged("bucket %q: %d bytes", sc.bucket, len(v))
	}
	root, inline := order.Uint64(v), v[bucketHeader:]
	if root == 0 {
		n, err := c.checkNode(inline, 0, sc.bucket)
		if err == nil && !n.leaf {
			err = damaged("bucket %q: inline page is a branch", sc.bucket)
		}
		return err
	}
	if sc.all {
		return c.walk(sc.bucket, root, nil, map[uint64]bool{}, 0)
	}
	for _, k := range sc.keys {
		if _, _, _, err := c.lookup(sc.bucket, root, k); err != nil {
			return err
		}
	}
	return nil
}

// walk checks every page of the tree of bucket under page id, whose parent
// holds first for it.
func (c *fileCheck) walk(bucket []byte, id uint64, first []byte, seen map[uint64]bool, depth int) error {
	if seen[id] || depth > maxDepth {
		return damaged("page %d is reached twice", id)
	}
	seen[id] = true
	n, err := c.node(id, bucket, first)
	if err != nil || n.leaf {
		return err
	}
	for i := range n.count() {
		k, _, _, child := n.elem(i)
		if err := c.walk(bucket, child, k, seen, depth+1); err != nil {
			return err
		}
	}
	return nil
}
