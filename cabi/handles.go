package main

import (
	"sync"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/loader"
	"github.com/croupier-data/croupier/permutation"
)

// handles maps the uint64 handles given to C to Go objects. 0 is never used,
// so a zeroed handle is always invalid.
var handles = struct {
	sync.Mutex
	next uint64
	objs map[uint64]any
}{objs: map[uint64]any{}}

func newHandle(v any) uint64 {
	handles.Lock()
	defer handles.Unlock()
	handles.next++
	handles.objs[handles.next] = v
	return handles.next
}

// lookup returns the object of handle h, which must be a T.
func lookup[T any](h uint64) (T, error) {
	handles.Lock()
	v, ok := handles.objs[h]
	handles.Unlock()
	t, isT := v.(T)
	if !ok || !isT {
		var zero T
		return zero, errcode.New(errcode.Closed, "lookup", "", "handle %d is not an open %s (released or never opened)", h, kindName[T]())
	}
	return t, nil
}

// release removes h and returns its object.
func release(h uint64) (any, error) {
	handles.Lock()
	defer handles.Unlock()
	v, ok := handles.objs[h]
	if !ok {
		return nil, errcode.New(errcode.Closed, "release", "", "handle %d is not open (released twice or never opened)", h)
	}
	delete(handles.objs, h)
	return v, nil
}

// kindName names the kind of object a handle of type T stands for as the ABI does.
func kindName[T any]() string {
	switch any((*T)(nil)).(type) {
	case **table.Table:
		return "table"
	case **permutation.Permutations:
		return "permutation"
	case **loader.Loader:
		return "dataset"
	case **loader.Stream, *batchStream, **loader.FollowStream:
		return "stream"
	case **loader.Mixture:
		return "mixture"
	case **loader.MixtureStream:
		return "mixture stream"
	case **loader.Follower:
		return "follower"
	case *loader.Source:
		return "dataset, follower or mixture"
	}
	return "object"
}
