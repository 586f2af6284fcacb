// Package parquetio gives package table arrow-go's general Parquet reader
// and writer, pqarrow, which a program that only reads tables does without.
// Import it for its side effect:
//
//	import _ "github.com/croupier-data/croupier/core/table/parquetio"
//
// Without it, package table reads the columns its own page decoder handles:
// 32- and 64-bit integers and floats, strings and binary (large ones too),
// and lists of those numbers, stored plain or dictionary-encoded, which is
// what training tables hold. It needs parquetio to write tables (Create, Append, Overwrite,
// Rewrite), to open Parquet whose schema has any other type, and to decode
// a chunk stored with another encoding; each of those says so in its error.
//
// It is kept apart because pqarrow stores its Arrow schema through arrow's
// Flight RPC package, which links gRPC and protobuf: 126 packages, a third
// of what a service that deals batches would otherwise link. libcroupier
// and the croupier command import it.
package parquetio

import (
	"context"
	"io"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/arrow-go/v18/parquet/schema"

	"github.com/croupier-data/croupier/core/table/internal/general"
)

func init() { general.Register(codec{}) }

type codec struct{}

func (codec) Schema(s *schema.Schema, kv metadata.KeyValueMetadata) (*arrow.Schema, error) {
	return pqarrow.FromParquet(s, &pqarrow.ArrowReadProperties{}, kv)
}

func (codec) NewWriter(s *arrow.Schema, w io.Writer, props *parquet.WriterProperties) (general.Writer, error) {
	return pqarrow.NewFileWriter(s, w, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema()))
}

func (codec) ReadColumn(ctx context.Context, pf *file.Reader, leaves []int, g int, mem memory.Allocator) (arrow.Table, error) {
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		return nil, err
	}
	return fr.ReadRowGroups(ctx, leaves, []int{g})
}
