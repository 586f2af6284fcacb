package main

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"

	"github.com/croupier-data/croupier/core/blockcache"
)

// cacheFlag adds --cache-dir to fs: the folder of the disk cache that keeps
// the blocks read of remote stores, by default the one Python's open_table
// uses (see defaultCacheDir); "" reads every byte from the store.
func cacheFlag(fs *flag.FlagSet) *string {
	return fs.String("cache-dir", defaultCacheDir(),
		`folder of the disk cache of blocks read from s3://, gs:// and azblob:// ("" for none)`)
}

// defaultCacheDir is $CROUPIER_CACHE_DIR when set (even to ""), else
// $XDG_CACHE_HOME/croupier/blocks, else ~/.cache/croupier/blocks.
func defaultCacheDir() string {
	if dir, ok := os.LookupEnv("CROUPIER_CACHE_DIR"); ok {
		return dir
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "croupier", "blocks")
}

// openCache opens the disk cache in dir, nil for "", bounded by
// $CROUPIER_CACHE_BYTES when set, else by blockcache's default.
func openCache(dir string) (*blockcache.Cache, error) {
	if dir == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, usagef("--cache-dir %q: %v", dir, err)
	}
	var bound int64
	if s := os.Getenv("CROUPIER_CACHE_BYTES"); s != "" {
		if bound, err = strconv.ParseInt(s, 10, 64); err != nil || bound < 1 {
			return nil, usagef("CROUPIER_CACHE_BYTES is %q; it must be a number of bytes, at least 1", s)
		}
	}
	return blockcache.Open(blockcache.Options{Dir: abs, MaxBytes: bound})
}
