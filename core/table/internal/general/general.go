// Package general holds the general Parquet codec once package
// core/table/parquetio registers it. It sits apart from both so that
// package table reads the codec without importing it (a program that only
// reads links no pqarrow) and package table's own tests can import
// parquetio without an import cycle.
package general

import (
	"context"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// Codec is what package table asks of a general Parquet codec.
type Codec interface {
	// Schema converts a footer's Parquet schema to Arrow, following the
	// Arrow schema a writer stored in the footer's key-value metadata.
	Schema(s *schema.Schema, kv metadata.KeyValueMetadata) (*arrow.Schema, error)
	// NewWriter starts a Parquet file of Arrow schema s on w, storing s in
	// its footer.
	NewWriter(s *arrow.Schema, w io.Writer, props *parquet.WriterProperties) (Writer, error)
	// ReadColumn decodes the leaf columns leaves, which make up one Arrow
	// column, of row group g of pf.
	ReadColumn(ctx context.Context, pf *file.Reader, leaves []int, g int, mem memory.Allocator) (arrow.Table, error)
}

// Writer writes one Parquet file.
type Writer interface {
	// WriteBuffered adds rec's rows to the current row group, starting
	// another when it is full.
	WriteBuffered(rec arrow.RecordBatch) error
	// Close writes the footer and closes the underlying writer.
	Close() error
	// FileMetadata is the footer Close wrote.
	FileMetadata() (*metadata.FileMetaData, error)
}

var registered Codec

// Register makes c the general codec. It is called from an init function,
// before any reader of Registered runs.
func Register(c Codec) { registered = c }

// Registered returns the general codec, or nil when none was registered.
func Registered() Codec { return registered }
