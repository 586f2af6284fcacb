package main

/*
#include <stdint.h>
*/
import "C"

import (
	"context"

	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
)

// batchStream is a stream croupier_stream_next reads: a dataset's
// (*loader.Stream) or a follower's (*loader.FollowStream).
type batchStream interface {
	Next(ctx context.Context) (loader.Batch, error)
	Close() error
}

// followOptions are the JSON options of croupier_follow_open: a dataset's,
// and the rounds'.
type followOptions struct {
	loader.Options
	Follow loader.FollowOptions `json:"follow"`
}

// followStreamOptions are the JSON options of croupier_follow_stream_open.
type followStreamOptions struct {
	loader.StreamOptions
	Position  loader.FollowPosition `json:"position"`
	StartStep int64                 `json:"step"` // the first global step; at least position.step
}

//export croupier_follow_open
func croupier_follow_open(th C.uint64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		t, err := lookup[*table.Table](uint64(th))
		if err != nil {
			return err
		}
		var opts followOptions
		if err := decodeJSON(optionsJSON, &opts, "follow options"); err != nil {
			return err
		}
		f, err := loader.NewFollower(t, opts.Options, opts.Follow)
		if err == nil {
			holdHeap(heapOf(f)) // until closeObject
		}
		return handleOut[*loader.Follower](out)(f, err)
	})
}

//export croupier_follow_info
func croupier_follow_info(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		f, err := lookup[*loader.Follower](uint64(h))
		if err != nil {
			return err
		}
		return encodeJSON(struct {
			loader.Options
			Follow loader.FollowOptions  `json:"follow"`
			Start  loader.FollowPosition `json:"start"`
		}{f.Options(), f.FollowOptions(), f.Start()}, out)
	})
}

//export croupier_follow_stream_open
func croupier_follow_stream_open(fh C.uint64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		f, err := lookup[*loader.Follower](uint64(fh))
		if err != nil {
			return err
		}
		var so followStreamOptions
		if err := decodeJSON(optionsJSON, &so, "follow stream options"); err != nil {
			return err
		}
		// The stream lives until it is released; it reads nothing yet.
		return handleOut[*loader.FollowStream](out)(f.Stream(context.Background(), so.Position, so.StartStep, so.StreamOptions))
	})
}

//export croupier_follow_round
func croupier_follow_round(h C.uint64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		s, err := lookup[*loader.FollowStream](uint64(h))
		if err != nil {
			return err
		}
		r := s.Round()
		return encodeJSON(struct {
			loader.Round
			Next loader.FollowPosition `json:"next"`
		}{r, r.Next()}, out)
	})
}

//export croupier_follow_steps
func croupier_follow_steps(h C.uint64_t, positionJSON *C.char, from, to C.int64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		f, err := lookup[*loader.Follower](uint64(h))
		if err != nil {
			return err
		}
		var pos loader.FollowPosition
		if err := decodeJSON(positionJSON, &pos, "follow position"); err != nil {
			return err
		}
		steps, err := f.Steps(callContext(), pos, int64(from), int64(to))
		if err != nil {
			return err
		}
		return encodeJSON(steps, out)
	})
}
