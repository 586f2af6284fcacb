package table

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"sync"

	"github.com/google/uuid"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
)

// Commits rest on the store's exclusive create (store.CreateExclusive): of
// writers racing for a version, one must win and the others must learn that
// they lost. A store, or a proxy in front of it, that ignores the condition
// (If-None-Match: * on S3) lets every writer "win" and keeps the last manifest
// written: the other commits report success and their rows are gone. So a
// writer checks, once per store and process, that a second exclusive create of
// one key fails, and refuses to commit where it does not; and after each
// commit it reads its manifest back.

// probeFact names the catalog entry recording a store that passed the probe.
const probeFact = "honours-exclusive-create"

// honoured holds the stores (by storeID) whose exclusive creates passed the
// probe in this process.
var honoured sync.Map

// storeID names the store a location is on, whatever folder inside it: its
// URI without the path (scheme, bucket, and the query naming the endpoint).
func storeID(loc *store.Location) string {
	u, err := url.Parse(loc.URI)
	if err != nil {
		return loc.URI
	}
	u.Path, u.RawPath, u.Fragment = "", "", ""
	return u.String()
}

// checkExclusiveCreate returns nil when loc's store is known to honour
// exclusive creates, or when opts trusts it to; else it probes the store and
// records a success in this process and in opts.Catalog. A failure is
// recorded nowhere: a store fixed later passes the next probe.
func checkExclusiveCreate(ctx context.Context, loc *store.Location, opts WriteOptions) error {
	if opts.TrustConditionalWrites {
		return nil
	}
	id := storeID(loc)
	if _, ok := honoured.Load(id); ok {
		return nil
	}
	ckey := factKey(probeFact, id)
	if opts.Catalog != nil && opts.Catalog.Get([]string{ckey})[0] != nil {
		honoured.Store(id, true)
		return nil
	}
	key := loc.Join(dataDir + uuid.NewString() + ".probe")
	ok, err := probeExclusiveCreate(ctx, loc, key)
	if err != nil {
		return err
	}
	if !ok {
		return errcode.New(errcode.InvalidArgument, "commit", loc.URI,
			"the store ignores conditional writes: a second exclusive create of %s replaced the object instead of failing, "+
				"so concurrent commits would overwrite each other's versions and lose their rows; use a store (or proxy) "+
				"that honours If-None-Match: *, or, if you know it does or only one writer ever commits to this table, "+
				"set WriteOptions.TrustConditionalWrites (Python: trust_conditional_writes=True; croupier: --trust-conditional-writes)",
			loc.ObjectURI(key))
	}
	honoured.Store(id, true)
	if opts.Catalog != nil {
		opts.Catalog.Put([]string{ckey}, [][]byte{[]byte("true")})
	}
	return nil
}

// probeExclusiveCreate creates key exclusively twice and reports whether the
// second create failed as it must. The object is deleted afterwards; one that
// a crash leaves under data/ is an orphan that Cleanup removes.
func probeExclusiveCreate(ctx context.Context, loc *store.Location, key string) (bool, error) {
	defer loc.Delete(context.WithoutCancel(ctx), key)
	if err := loc.CreateExclusive(ctx, key, []byte("first")); err != nil {
		return false, err
	}
	err := loc.CreateExclusive(ctx, key, []byte("second"))
	switch errcode.Of(err) {
	case errcode.AlreadyExists:
		return true, nil
	case errcode.OK:
		return false, nil
	}
	return false, err
}

// commitManifest creates the manifest of m.Version exclusively and reads it
// back: it returns nil only when the store holds exactly this commit's
// manifest, errcode.AlreadyExists when another writer had made that version,
// and errcode.Changed when the store accepted the create and then held
// another manifest under its name (a store that ignores the condition).
func commitManifest(ctx context.Context, loc *store.Location, m *manifest) error {
	m.Writer = uuid.NewString()
	buf, err := m.encode()
	if err != nil {
		return errcode.Wrap(err, errcode.Internal, "commit", loc.URI)
	}
	key := loc.Join(manifestName(m.Version))
	passPhase("manifest")
	if err := loc.CreateExclusive(ctx, key, buf); err != nil {
		return err
	}
	passPhase("committed")
	got, err := loc.ReadAll(ctx, key)
	if err != nil {
		return errcode.Wrap(fmt.Errorf("reading back the manifest just committed: %w", err), errcode.Of(err), "commit", loc.ObjectURI(key))
	}
	if !bytes.Equal(got, buf) {
		return errcode.New(errcode.Changed, "commit", loc.ObjectURI(key),
			"the store accepted this commit's exclusive create of version %d and then held another manifest under its name: "+
				"it does not honour conditional writes, and this commit's rows are not in the table", m.Version)
	}
	return nil
}
