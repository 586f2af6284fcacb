package table

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"

	"github.com/apache/arrow-go/v18/parquet/metadata"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// footerGuess is how many trailing bytes the first footer read fetches: enough
// for most footers, so that one request usually suffices.
const footerGuess = 64 << 10

var magic = []byte("PAR1")

// readFooter reads and parses the Parquet footer of obj.
func readFooter(ctx context.Context, loc *store.Location, obj store.Object) (md *metadata.FileMetaData, err error) {
	const op = "read footer"
	where := loc.ObjectURI(obj.Key)
	if obj.Size < 12 {
		return nil, errcode.New(errcode.Corrupt, op, where, "not a Parquet file: %d bytes is too short", obj.Size)
	}
	r := loc.NewReaderAt(ctx, obj)
	n := min(obj.Size, footerGuess)
	tail := make([]byte, n)
	if _, err := r.ReadAt(tail, obj.Size-n); err != nil {
		return nil, err
	}
	if !bytes.Equal(tail[n-4:], magic) {
		return nil, errcode.New(errcode.Corrupt, op, where, "not a Parquet file: no PAR1 magic at the end")
	}
	flen := int64(binary.LittleEndian.Uint32(tail[n-8:]))
	if flen+12 > obj.Size {
		return nil, errcode.New(errcode.Corrupt, op, where, "footer length %d exceeds file size %d", flen, obj.Size)
	}
	if flen+8 > n {
		tail = make([]byte, flen+8)
		if _, err := r.ReadAt(tail, obj.Size-flen-8); err != nil {
			return nil, err
		}
		n = flen + 8
	}
	defer func() {
		// The thrift decoder panics on some malformed input.
		if p := recover(); p != nil {
			md, err = nil, errcode.New(errcode.Corrupt, op, where, "malformed footer: %v", p)
		}
	}()
	md, err = metadata.NewFileMetaData(tail[n-8-flen:n-8], nil)
	if err != nil {
		return nil, errcode.Wrap(fmt.Errorf("malformed footer: %w", err), errcode.Corrupt, op, where)
	}
	return md, nil
}
