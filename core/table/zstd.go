package table

import (
	"sync"

	"github.com/DataDog/zstd"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Parquet pages of training data are mostly zstd, and decompressing them was
// a third of the CPU time of a read. arrow-go decompresses with
// klauspost/compress, in pure Go; libzstd, the reference C library that
// pyarrow also uses, decompresses the same pages 1.4–2.3× faster. The cgo
// bindings of DataDog/zstd build libzstd from its vendored source with the C
// compiler croupier's shared library needs anyway, and arrow-go provides
// RegisterCodec for this swap. Compression, used only to write tables, stays
// with arrow-go's codec.

func init() {
	base, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		panic(err)
	}
	compress.RegisterCodec(compress.Codecs.Zstd, libzstd{base})
}

// libzstd is arrow-go's zstd codec with decompression by libzstd.
type libzstd struct{ compress.Codec }

// dctxs holds libzstd decompression contexts: making one per page would cost
// more than decompressing a small page.
var dctxs = sync.Pool{New: func() any { return zstd.NewCtx() }}

// DecodeWithError decompresses src into dst, whose length is the size the
// page header declares; data that decompresses to more is an error.
func (c libzstd) DecodeWithError(dst, src []byte) ([]byte, error) {
	if len(dst) == 0 || len(src) == 0 {
		return compress.Decode(c.Codec, dst, src)
	}
	ctx := dctxs.Get().(zstd.Ctx)
	defer dctxs.Put(ctx)
	n, err := ctx.DecompressInto(dst, src)
	if err != nil {
		return nil, err
	}
	return dst[:n], nil
}

// Decode is DecodeWithError for callers that expect a panic on bad input.
func (c libzstd) Decode(dst, src []byte) []byte {
	out, err := c.DecodeWithError(dst, src)
	if err != nil {
		panic(err)
	}
	return out
}
