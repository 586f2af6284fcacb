// Package all links in every driver of croupier's remote stores: s3://,
// gs:// and azblob:// (see core/store's Driver). croupier's C library and
// command import it; a program that uses one store imports that driver
// alone.
//
//	import _ "github.com/croupier-data/croupier/drivers/all"
package all

import (
	_ "github.com/croupier-data/croupier/drivers/azure" // azblob://
	_ "github.com/croupier-data/croupier/drivers/gcs"   // gs://
	_ "github.com/croupier-data/croupier/drivers/s3"    // s3://
)
