//go:build cgo

package libzstd

import (
	"bytes"
	"testing"

	"github.com/apache/arrow-go/v18/parquet/compress"
)

// TestRegister: after Register, arrow-go's zstd codec decompresses with
// libzstd, round trips a page, and refuses pages that decompress to more
// than their header declares or are cut short.
func TestRegister(t *testing.T) {
	for range 2 { // a second call changes nothing
		if !Register() {
			t.Fatal("Register reports false with cgo")
		}
	}
	codec, err := compress.GetCodec(compress.Codecs.Zstd)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := codec.(libzstd); !ok {
		t.Fatalf("the zstd codec is %T, not libzstd", codec)
	}
	page := bytes.Repeat([]byte("croupier deals rows "), 5000)
	packed := codec.Encode(nil, page)
	got, err := compress.Decode(codec, make([]byte, len(page)), packed)
	if err != nil || !bytes.Equal(got, page) {
		t.Fatalf("round trip: %d bytes, err %v", len(got), err)
	}
	// A page header declaring fewer bytes than the data holds.
	if _, err := compress.Decode(codec, make([]byte, len(page)-1), packed); err == nil {
		t.Fatal("decompressing into a short buffer succeeded")
	}
	if _, err := compress.Decode(codec, make([]byte, len(page)), packed[:len(packed)/2]); err == nil {
		t.Fatal("decompressing a truncated page succeeded")
	}
}
