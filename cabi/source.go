package main

/*
#include <stdint.h>
*/
import "C"

import (
	"encoding/json"

	"github.com/croupier-data/croupier/loader"
)

// The checkpoints of datasets and followers are built and checked here, by
// the Go core's source protocol (loader.Source), for every kind: Python keeps
// only the edge between its state dicts and their JSON.

// sourceAt looks up handle h of a source (a dataset or a follower).
func sourceAt(h C.uint64_t) (loader.Source, error) {
	return lookup[loader.Source](uint64(h))
}

//export croupier_source_checkpoint
func croupier_source_checkpoint(h C.uint64_t, positionJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		src, err := sourceAt(h)
		if err != nil {
			return err
		}
		var pos loader.SourcePosition
		if err := decodeJSON(positionJSON, &pos, "position"); err != nil {
			return err
		}
		saved, err := src.Save(pos)
		if err != nil {
			return err
		}
		return encodeJSON(saved, out)
	})
}

//export croupier_source_restore
func croupier_source_restore(h C.uint64_t, checkpointJSON, optionsJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		src, err := sourceAt(h)
		if err != nil {
			return err
		}
		var opts loader.RestoreOptions
		if err := decodeJSON(optionsJSON, &opts, "restore options"); err != nil {
			return err
		}
		pos, err := src.Restore(callContext(), json.RawMessage(cBytes(checkpointJSON)), opts)
		if err != nil {
			return err
		}
		return encodeJSON(pos, out)
	})
}
