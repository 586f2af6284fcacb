package permutation

import (
	"context"
	"fmt"
	"path"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Spill leases. A build's spill lives under _spill/<token>/ of the
// permutation's location until the build ends; a build whose every process
// died (killed, out of memory, its host lost) cannot delete it, and no other
// process knows for sure that it died. So each rank of a running build
// keeps a lease there, an object it rewrites every leaseRenew, and a later
// build that commits at the location deletes the spill of every other
// build none of whose objects was written for spillStale, by the store's
// own clock: the modification times of its objects against that of the
// build record just written (see docs/spec.md, "Distributed builds").
//
// A running build's spill is never deleted so while it renews its leases:
// its newest object is at most leaseRenew old. A rank that could not renew
// its lease for spillStale/2 fails its build at its next step, long before
// another build could take its spill for dead. And a spill deleted under a
// build that still reads it can only fail that build: spill objects are
// never rewritten, so a missing one is an error, never other rows.

// leaseRenew is how often a rank rewrites its lease, and spillStale how long
// a spill none of whose objects was written is taken for a dead build's;
// variables for tests.
var (
	leaseRenew = time.Minute
	spillStale = time.Hour
)

// A lease keeps a rank's spill from the sweeps of other builds.
type lease struct {
	loc     *store.Location
	key     string
	stop    chan struct{}
	done    chan struct{}
	renewed atomic.Int64 // when it was last written, in Unix nanoseconds of this host's clock
}

// startLease writes the lease at key and renews it until end.
func startLease(ctx context.Context, loc *store.Location, key string) (*lease, error) {
	l := &lease{loc: loc, key: key, stop: make(chan struct{}), done: make(chan struct{})}
	if err := l.write(ctx); err != nil {
		return nil, err
	}
	go l.renew(context.WithoutCancel(ctx))
	return l, nil
}

// write rewrites the lease, its content the host's time (for people; the
// sweep reads the store's modification time).
func (l *lease) write(ctx context.Context) error {
	now := time.Now()
	if err := l.loc.WriteAll(ctx, l.key, []byte(now.UTC().Format(time.RFC3339Nano)+"\n"), store.WriterOptions{}); err != nil {
		return err
	}
	l.renewed.Store(now.UnixNano())
	return nil
}

// renew rewrites the lease every leaseRenew until end; a failed write is
// tried again at the next tick (see check).
func (l *lease) renew(ctx context.Context) (err error) {
	defer errcode.Recover(&err, errcode.Internal, "spill lease", l.loc.ObjectURI(l.key))
	defer close(l.done)
	tick := time.NewTicker(leaseRenew)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return nil
		case <-tick.C:
			l.write(ctx)
		}
	}
}

// check fails when the lease was not renewed for spillStale/2: then the
// rank's spill may soon be taken for a dead build's.
func (l *lease) check() error {
	if l == nil {
		return nil
	}
	since := time.Since(time.Unix(0, l.renewed.Load()))
	if since <= spillStale/2 {
		return nil
	}
	return errcode.New(errcode.Unavailable, "build permutation", l.loc.ObjectURI(l.key),
		"the rank could not renew its spill's lease for %s; another build may take its spill for a dead build's", since.Round(time.Second))
}

// end stops the renewals and deletes the lease.
func (l *lease) end(ctx context.Context) {
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
	l.loc.Delete(context.WithoutCancel(ctx), l.key)
}

// leaseKey returns the key of rank's lease in the spill of the build token.
func leaseKey(loc *store.Location, token string, rank int) string {
	return path.Join(loc.Key, spillDir, token, fmt.Sprintf("lease-%d", rank))
}

// removePrefix deletes every object under prefix, whatever ctx's state.
func removePrefix(ctx context.Context, loc *store.Location, prefix string) error {
	ctx = context.WithoutCancel(ctx)
	objs, err := loc.List(ctx, prefix, 0)
	if err != nil {
		return err
	}
	return deleteObjects(ctx, loc, objs)
}

// deleteObjects deletes objs, eight at a time.
func deleteObjects(ctx context.Context, loc *store.Location, objs []store.Object) error {
	var g errgroup.Group
	g.SetLimit(8)
	for _, o := range objs {
		g.Go(func() (err error) {
			defer errcode.Recover(&err, errcode.Internal, "spill", loc.ObjectURI(o.Key))
			return loc.Delete(ctx, o.Key)
		})
	}
	return g.Wait()
}

// sweepSpills deletes the spill of every build at loc but the one of token
// none of whose objects was written for spillStale before now, a time of
// the store's clock. A spill with an object of no modification time is
// of an unknown age, and kept.
func sweepSpills(ctx context.Context, loc *store.Location, token string, now time.Time) error {
	root := path.Join(loc.Key, spillDir) + "/"
	objs, err := loc.List(ctx, root, 0)
	if err != nil {
		return err
	}
	builds := map[string][]store.Object{}
	newest := map[string]time.Time{}
	for _, o := range objs {
		b, _, _ := strings.Cut(strings.TrimPrefix(o.Key, root), "/")
		if b == token {
			continue
		}
		builds[b] = append(builds[b], o)
		if o.ModTime.IsZero() { // of an unknown age: never stale
			newest[b] = now
		}
		if o.ModTime.After(newest[b]) {
			newest[b] = o.ModTime
		}
	}
	var stale []store.Object
	for b, build := range builds {
		if now.Sub(newest[b]) >= spillStale {
			stale = append(stale, build...)
		}
	}
	return deleteObjects(ctx, loc, stale)
}
