// Command croupier creates and inspects croupier tables, builds permutations,
// and answers "which rows did step t train on?".
//
// Usage:
//
//	croupier tables create URI FILE.parquet... [--row-group-rows N] [--trust-conditional-writes]
//	croupier tables append URI FILE.parquet... [--trust-conditional-writes]  # prints the new version
//	croupier tables versions URI [--long]              # --long: commit time, rows, rows added
//	croupier tables list [URI] [--catalog PATH]        # tables under URI, or a catalog's names
//	croupier tables inspect URI [--version N]         # schema, rows, files, row groups
//	croupier tables cleanup URI --keep-last N [--grace 24h]
//
//	croupier rewrite SRC DST [--columns a,b] [--row-group-rows N] [--page-bytes N]
//	    [--memory-budget BYTES] [--version N] [--quiet] [--trust-conditional-writes]
//
//	croupier permute TABLE_URI PERM_URI [--version N] [--filter SQL]
//	    [--split-random 0.9,0.1 | --split-sequential 900,100 | --split-hash col1,col2:9,1[:discard]
//	     | --split-calculated EXPR] [--split-fixed N] [--split-names train,val] [--seed N]
//	    [--shuffle-seed N] [--clump N|auto] [--window N] [--group-by col1,col2] [--lengths COLUMN] [--quiet]
//	    [--build-memory BYTES] [--cache-dir DIR]
//	croupier permute show PERM_URI
//
//	croupier deal (--perm PERM_URI [--split NAME] | --table TABLE_URI [--version N])
//	    (--global-batch-size G [--num-splits S] | --tokens-per-step N [--oversize error|truncate])
//	    [--world-size W] [--rank R] [--epoch E] [--shuffle-seed N] [--drop-last=false] --step T
//	croupier deal --checkpoint STATE.json [--perm PERM_URI [--split NAME] | --table TABLE_URI]
//	    [--world-size W] [--rank R]
//	    (both: [--columns col1,col2] prints those columns of each row of the step)
//	croupier deal --checkpoint STATE.json (--which-steps COLUMN=VALUE | --row ID) [--world-size W]
//	croupier deal --checkpoint MIXTURE.json [--step T] [--world-size W] [--rank R] [--columns col1,col2]
//	croupier deal --checkpoint FOLLOW.json [--step T | --which-steps COLUMN=VALUE | --row ID]
//	    [--world-size W] [--rank R] [--columns col1,col2]
//	    (every deal: --steps A:B for steps A to B-1, instead of --step)
//	    (every deal: [--cache-dir DIR])
//
//	croupier read (--perm PERM_URI [--split NAME] | --table TABLE_URI [--version N])
//	    --global-batch-size G [--num-splits S] [--world-size W] [--rank R] [--epoch E]
//	    [--shuffle-seed N] [--step T] [--steps N] [--columns col1,col2]
//	    [--memory-budget BYTES] [--max-reads N] [--cache-dir DIR]
//
//	croupier bench [--dir REPO] [--quick] [--dry-run]
//
// Every command takes --json and then prints one JSON document on stdout.
// URIs are those of the library (file://, mem://, s3://, gs://, azblob://); a
// plain path is taken as a local file:// URI. Flags may come before or after
// the positional arguments.
//
// Split sizes for --split-random and --split-sequential are fractions of the
// kept rows when any value has a fraction or a percent sign (0.9,0.1 or
// 90%,10%), row counts when all are integers (900,100), or splits of
// --split-fixed N rows each when the value is "fixed". Since 95,5 could have
// been meant as percentages, permute says on stderr when it reads integers as
// row counts, and prints the sizes of the splits it built.
// --shuffle-seed, --clump or --window turns on the shuffle; --clump auto
// clumps the rows of each page of the table's widest column, so that clumps
// start and end on page boundaries (docs/spec.md, "Page-aligned clumps"),
// and the permutation's spec records clump size -1. --group-by keeps
// the rows sharing those columns' values together as one group, dealt whole
// in one step to one rank (docs/concepts.md, "Groups"); it takes no --clump
// or --window, and only a --split-hash on columns of the group key.
// --build-memory bounds the build's memory whatever the table's size (default
// 1 GiB, at least 256 MiB; docs/spec.md, "Building in bounded memory"); it
// never changes the permutation built. The progress on stderr says the rows
// kept, the bytes read and the time left. permute builds in one process;
// `torchrun --nproc-per-node N -m croupier.permute` builds the same
// permutation on N processes, with the same flags (docs/tuning.md, "The
// command: python -m croupier.permute").
//
// read reads rank R's steps of epoch E from step T on (--steps of them, or to
// the epoch's end) as a training loop would, drops them, and prints what they
// cost: the rows and the rate, the time to the first batch, the range
// requests made (per 1,000 rows, and how many were hedged), the bytes fetched
// from the store and decoded for each byte of Arrow delivered, and the
// horizons the stream planned (docs/tuning.md). --json prints these with the
// stream's counters (its stats). Unless GOMEMLIMIT is set, it holds Go's heap
// to what the stream's budget lets it hold, as the Python library does, so
// that its rates and memory are those a training process sees.
//
// rewrite copies the rows of SRC, a plain Parquet dataset (an export written
// by pyarrow or Spark in large row groups, say) or a croupier table, in row id
// order into a new croupier table at DST, in row groups of --row-group-rows
// (4,096 by default) with a page index, for shuffled reads; --columns keeps
// only those columns. It reads SRC in slices of consecutive rows, decoding
// only the pages each needs, so it holds about --memory-budget bytes (256 MiB
// by default) however large SRC's row groups are, and prints its progress in
// rows on stderr. DST gets its one version only once every row is
// written: an interrupted rewrite leaves none, and may be run again.
//
// Before its first commit to a store, a command that writes a table checks
// that the store honours conditional writes and refuses to commit where it
// does not (concurrent commits there would lose rows);
// --trust-conditional-writes skips the check (see docs/storage.md).
//
// deal prints the row ids each rank gets at global step T of epoch E (every
// rank unless --rank), as the loader deals them: the same set of rows makes
// up a step at every world size. --drop-last defaults to true, as in the
// Python dataset. With --checkpoint, the dealing parameters and position come
// from a dataset state dict (as json.dump(ds.state_dict()) writes it) and the
// step shown is the next one the resumed run trains on: step steps_consumed,
// or step 0 of the next epoch when the checkpoint was taken at an epoch's end.
// The checkpoint's permutation_id must be that of the split or table opened,
// and its table_id (format 2) that of the table. A checkpoint of format 2
// records where its permutation lives (permutation_uri), and one of a table
// (permutation_id "identity") names its table, so --perm and --table may be
// left out. table_version may be a number or a string; a steps_consumed past
// the end of its epoch is an error, not a step of the next epoch. Flags are
// checked before anything is opened: --global-batch-size and --world-size at
// least 1, --num-splits and --epoch at least 0, --rank below --world-size.
// --columns also prints, under each rank's row ids, those columns of each
// row (in --json, "rows": one object per row). For a croupier table whose
// manifest records it, a line under each rank's row ids gives the version
// that added each row (in --json, "versions").
//
// deal --steps A:B deals global steps A to B-1 in one call, each as --step
// deals it (in --json, "steps": one object a step, with its epoch, or its
// round when following, or its weights and slots for a mixture, and its
// ranks): the steps of --epoch, or of the checkpoint's epoch, or of
// following, or of a mixture. A defaults to 0; B to the checkpoint's
// steps_consumed, so that --checkpoint FILE --steps : gives every step that
// trained the checkpoint, and without a checkpoint to the epoch's end.
//
// deal --which-steps COLUMN=VALUE looks back from a checkpoint: the rows
// whose COLUMN reads VALUE (an integer or a string as written; NotFound when
// none does) or, with --row, the one row ID, and every step that trained on
// one of them before the checkpoint: every step of the epochs before its
// epoch, and its epoch's first steps_consumed steps, each with the epoch, the
// step and the rank of --world-size that got the row. It reads the table's
// COLUMN and each of those epochs' whole order once.
// With --tokens-per-step the steps are token budgets (docs/concepts.md,
// "Token-budget steps") of a permutation built with --lengths: each rank's
// line also gives its tokens, and --json each row's length.
//
// deal --checkpoint with a mixture's state dict (Python's
// Mixture.state_dict(), recognised by its "sources") answers which rows of
// which source made mixture step T: for each slot of the step, the source,
// the source's epoch and step that fill it, and each rank's rows of that
// step at --world-size (every rank unless --rank). Each source is opened
// where its checkpoint says (permutation_uri and split, or table_uri); a
// followed source (its checkpoint of kind "follow") forms its rounds of the
// versions committed, as deal does for following, its slots naming the
// round and the global step of following; a source that is a mixture (its
// checkpoint a mixture's) is opened the same way, its slots naming its
// step and holding that step's own slots. T
// defaults to the step after the checkpoint; a T after it is planned from
// the checkpoint on, and a T before it by replaying the mixture from its
// start, every source at its beginning (an error when that replay does
// not reach the checkpoint's position).
//
// deal --checkpoint with following's state dict (Python's
// FollowingDataset.state_dict(), kind "follow") answers the same of a run
// following a growing table: each rank's rows of global step T (by default
// the step after the checkpoint) at --world-size, the version that added
// each row and the round holding the step, or with --which-steps and --row
// every step before the checkpoint that trained on the rows, a replayed row
// in each round that dealt it. Rounds are formed from the table's
// checkpointed URI and the versions committed now, as the run formed them
// (they are a function of the versions); a step of a round whose versions
// are not committed yet is NotFound.
//
// permute and deal read the data files of s3://, gs:// and azblob:// tables
// through the disk cache in --cache-dir (docs/storage.md, "The disk cache"),
// by default the folder Python's open_table uses: $CROUPIER_CACHE_DIR when
// set, else $XDG_CACHE_HOME/croupier/blocks, else ~/.cache/croupier/blocks,
// bounded by $CROUPIER_CACHE_BYTES or 64 GiB (at most half the space free on
// its filesystem); --cache-dir "" reads every byte from the store. rewrite
// reads its source once, without the cache.
//
// bench runs the benchmark harness, `make bench` in the repository named by
// --dir (bench/run.py: object-store throughput, croupier and its peers reading
// the same data, permutation build, commits), which prints tables and
// regenerates bench/RESULTS.md and bench/plots; --quick is a smoke run of
// about a minute that writes under build/bench/quick instead.
//
// Errors are printed as "croupier: <message>" on stderr, where the message
// names what failed and where (URI, file, column). The exit status is 1 for
// errors and 2 for bad command-line usage.
package main
