//go:build cgo

package libzstd

import (
	"sync"

	"github.com/DataDog/zstd"
	"github.com/apache/arrow-go/v18/parquet/compress"
)

// Register makes libzstd decompress the zstd pages of every Parquet reader
// in the process, croupier's and any other user of arrow-go's codec
// registry. It reports whether it did: without cgo it does nothing and
// returns false. Calling it again changes nothing.
func Register() bool {
	once.Do(func() {
		base, err := compress.GetCodec(compress.Codecs.Zstd)
		if err != nil {
			panic(err) // arrow-go registers zstd itself
		}
		compress.RegisterCodec(compress.Codecs.Zstd, libzstd{base})
	})
	return true
}

var once sync.Once

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
