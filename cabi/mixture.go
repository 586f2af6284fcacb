package main

/*
#include <stdint.h>

#include "arrow_c.h"
*/
import "C"

import (
	"context"
	"errors"
	"io"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/cdata"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/loader"
)

//export croupier_mixture_open
func croupier_mixture_open(datasets *C.uint64_t, n C.int64_t, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		if n < 0 || (n > 0 && datasets == nil) {
			return errcode.New(errcode.InvalidArgument, "open mixture", "", "%d datasets at %p", n, datasets)
		}
		var sources []loader.Source
		for _, h := range unsafe.Slice(datasets, int(n)) {
			src, err := lookup[loader.Source](uint64(h))
			if err != nil {
				return err
			}
			sources = append(sources, src)
		}
		var opts loader.MixtureOptions
		if err := decodeJSON(optionsJSON, &opts, "mixture options"); err != nil {
			return err
		}
		return handleOut[*loader.Mixture](out)(loader.NewMixture(sources, opts))
	})
}

// mixtureAt looks up mixture handle h and decodes a position of it; NULL
// is the mixture's start.
func mixtureAt(h C.uint64_t, s *C.char) (*loader.Mixture, loader.MixturePosition, error) {
	m, err := lookup[*loader.Mixture](uint64(h))
	if err != nil {
		return nil, loader.MixturePosition{}, err
	}
	pos := m.Start()
	if s == nil {
		return m, pos, nil
	}
	return m, pos, decodeJSON(s, &pos, "mixture position")
}

// mixturePlan is what croupier_mixture_plan returns.
type mixturePlan struct {
	Steps    [][]loader.MixtureSlot `json:"steps"`
	Ended    bool                   `json:"ended"`
	Position loader.MixturePosition `json:"position"`
}

//export croupier_mixture_plan
func croupier_mixture_plan(h C.uint64_t, positionJSON *C.char, steps C.int64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, pos, err := mixtureAt(h, positionJSON)
		if err != nil {
			return err
		}
		plan := mixturePlan{Steps: [][]loader.MixtureSlot{}}
		for range max(int64(steps), 0) {
			slots, next, ok, err := m.Next(callContext(), pos)
			if err != nil {
				return err
			}
			pos = next
			if !ok {
				plan.Ended = true
				break
			}
			plan.Steps = append(plan.Steps, slots)
		}
		plan.Position = pos
		return encodeJSON(plan, out)
	})
}

//export croupier_mixture_end
func croupier_mixture_end(h C.uint64_t, positionJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, pos, err := mixtureAt(h, positionJSON)
		if err != nil {
			return err
		}
		end, err := m.End(callContext(), pos)
		if err != nil {
			return err
		}
		return encodeJSON(end, out)
	})
}

//export croupier_mixture_weights
func croupier_mixture_weights(h C.uint64_t, step C.int64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, err := lookup[*loader.Mixture](uint64(h))
		if err != nil {
			return err
		}
		if step < 0 {
			return errcode.New(errcode.InvalidArgument, "mixture weights", "", "step %d is negative", step)
		}
		return encodeJSON(m.WeightsAt(int64(step)), out)
	})
}

//export croupier_mixture_checkpoint
func croupier_mixture_checkpoint(h C.uint64_t, positionJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, pos, err := mixtureAt(h, positionJSON)
		if err != nil {
			return err
		}
		c, err := m.Checkpoint(pos)
		if err != nil {
			return err
		}
		return encodeJSON(c, out)
	})
}

//export croupier_mixture_resume
func croupier_mixture_resume(h C.uint64_t, checkpointJSON *C.char, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, err := lookup[*loader.Mixture](uint64(h))
		if err != nil {
			return err
		}
		c, err := loader.ParseMixtureCheckpoint(cBytes(checkpointJSON), "mixture state dict")
		if err != nil {
			return err
		}
		pos, err := m.Resume(callContext(), c)
		if err != nil {
			return err
		}
		return encodeJSON(pos, out)
	})
}

//export croupier_mixture_stream_open
func croupier_mixture_stream_open(h C.uint64_t, positionJSON, optionsJSON *C.char, out *C.uint64_t, errOut **C.char) C.int {
	return guard(errOut, func() error {
		m, pos, err := mixtureAt(h, positionJSON)
		if err != nil {
			return err
		}
		var so loader.MixtureStreamOptions
		if err := decodeJSON(optionsJSON, &so, "mixture stream options"); err != nil {
			return err
		}
		// The stream reads nothing until its first step, and lives until it
		// is released, not only for this call.
		return handleOut[*loader.MixtureStream](out)(m.Stream(context.Background(), pos, so))
	})
}

// mixtureStep is the JSON of croupier_mixture_stream_next.
type mixtureStep struct {
	Slots   []loader.MixtureSlot   `json:"slots"`
	Records int                    `json:"records"`
	Next    loader.MixturePosition `json:"next"`
}

//export croupier_mixture_stream_next
func croupier_mixture_stream_next(h C.uint64_t, records C.int64_t, outArrays *C.struct_ArrowArray, outSchemas *C.struct_ArrowSchema, outStep *C.int64_t, out **C.char, errOut **C.char) C.int {
	return guard(errOut, func() error {
		s, err := lookup[*loader.MixtureStream](uint64(h))
		if err != nil {
			return err
		}
		if most := s.Mixture().MaxRecords(); int64(records) < most {
			return errcode.New(errcode.InvalidArgument, "mixture stream next", "",
				"%d arrays given for steps of up to %d records", records, most)
		}
		b, err := s.Next(callContext())
		if errors.Is(err, io.EOF) {
			*outStep = -1
			return nil
		}
		if err != nil {
			return err
		}
		defer func() {
			for _, r := range b.Records {
				r.Release()
			}
		}()
		arrays, schemas := unsafe.Slice(outArrays, len(b.Records)), unsafe.Slice(outSchemas, len(b.Records))
		if err := encodeJSON(mixtureStep{Slots: b.Slots, Records: len(b.Records), Next: b.Next}, out); err != nil {
			return err
		}
		for i, r := range b.Records {
			cdata.ExportArrowRecordBatch(r, (*cdata.CArrowArray)(unsafe.Pointer(&arrays[i])), (*cdata.CArrowSchema)(unsafe.Pointer(&schemas[i])))
		}
		*outStep = C.int64_t(b.Step)
		return nil
	})
}
