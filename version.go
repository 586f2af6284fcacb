// Package croupier holds what the whole project shares: its version, read
// from the file VERSION at the repository's root. That file is the one place
// the version is written: the Go library embeds it here, and the Python
// package's metadata reads it (pyproject.toml, [tool.setuptools.dynamic]).
// The Go API lives in the packages below: core/table, permutation, loader.
package croupier

import (
	_ "embed"
	"strings"
)

//go:embed VERSION
var versionFile string

// Version is the project's version, e.g. "0.1.0".
var Version = strings.TrimSpace(versionFile)
