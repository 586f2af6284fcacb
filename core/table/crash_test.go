package table_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	"github.com/croupier-data/croupier/core/table"
	"github.com/croupier-data/croupier/internal/tabletest"
)

// commitPhases returns the phases a commit passes, in order, recorded from a
// real create and append in this process (both pass the same ones).
func commitPhases(t *testing.T) []string {
	t.Helper()
	ctx := context.Background()
	var phases []string
	table.SetCommitHook(func(p string) { phases = append(phases, p) })
	defer table.SetCommitHook(nil)
	uri := "file://" + filepath.Join(t.TempDir(), "phases")
	tb, err := table.Create(ctx, uri, tabletest.Reader(0, 1), table.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tb.Close()
	create := phases
	phases = nil
	if _, err := table.Append(ctx, uri, tabletest.Reader(1, 1), table.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(create) == 0 || create[len(create)-1] != "committed" || !slices.Equal(create, phases) {
		t.Fatalf("commit phases: create %v, append %v; want the same, ending with committed", create, phases)
	}
	return create
}

// TestWriterKilledAtEveryPhase kills a writer process with SIGKILL at each
// phase of a commit, creating a table or appending to one, on file:// and on
// the S3 server. After each kill the table holds exactly its committed
// versions, each reading its own rows; the next commit gets the next version
// number; and Cleanup removes every data file the killed writer left.
func TestWriterKilledAtEveryPhase(t *testing.T) {
	phases := commitPhases(t)
	s := startS3(t)
	for _, where := range []string{"file", "s3"} {
		for _, op := range []string{"create", "append"} {
			for _, phase := range phases {
				t.Run(where+"/"+op+"/"+phase, func(t *testing.T) {
					t.Parallel()
					uri := "file://" + filepath.Join(t.TempDir(), "tbl")
					if where == "s3" {
						uri = s.URI("bkt", "killed/"+strings.ReplaceAll(t.Name(), "/", "-"))
					}
					killedWriter(t, uri, op, phase)
				})
			}
		}
	}
}

func killedWriter(t *testing.T, uri, op, phase string) {
	ctx := context.Background()
	// want[v-1] holds the ids of version v.
	var want [][]int64
	if op == "append" {
		tb, err := table.Create(ctx, uri, tabletest.Reader(100, 4), table.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tb.Close()
		if _, err := table.Append(ctx, uri, tabletest.Reader(200, 4), table.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		want = [][]int64{seq(100, 4), append(seq(100, 4), seq(200, 4)...)}
	}

	// The writer commits rows writerID(0, 0, …) and dies at phase.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envWriterURI+"="+uri, envWriterID+"=0", envKillAt+"="+phase)
	if op == "create" {
		cmd.Env = append(cmd.Env, envCreate+"=1", envAppends+"=0")
	} else {
		cmd.Env = append(cmd.Env, envAppends+"=1")
	}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !exit.Sys().(syscall.WaitStatus).Signaled() ||
		exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("writer was not killed at %s: %v\n%s", phase, err, out)
	}
	if phase == "committed" {
		last := []int64{}
		if len(want) > 0 {
			last = want[len(want)-1]
		}
		want = append(want, append(slices.Clone(last), seq(writerID(0, 0, 0), rowsPerAppend)...))
	}

	// Exactly the committed versions are visible, each whole.
	checkVersions(t, uri, want)
	if len(want) == 0 {
		_, err := table.Open(ctx, uri)
		wantErr(t, err, errcode.NotFound)
		tb, err := table.Create(ctx, uri, tabletest.Reader(300, 2), table.WriteOptions{})
		if err != nil {
			t.Fatalf("create after a writer died creating: %v", err)
		}
		tb.Close()
		want = [][]int64{seq(300, 2)}
	}
	// The next commit takes the next version.
	v, err := table.Append(ctx, uri, tabletest.Reader(500, 2), table.WriteOptions{})
	if err != nil || v != int64(len(want)+1) {
		t.Fatalf("append after the kill: version %d, %v; want %d", v, err, len(want)+1)
	}
	want = append(want, append(slices.Clone(want[len(want)-1]), seq(500, 2)...))
	checkVersions(t, uri, want)

	// What the killed writer left is unreferenced; Cleanup removes all of it
	// and nothing else.
	latest := open(t, uri)
	referenced := map[string]bool{}
	for _, f := range latest.Files() {
		referenced[f.Key] = true
	}
	loc := mustLoc(t, uri)
	// On file:// a data file being written is a temporary file in _tmp/.
	var orphans []string
	for _, key := range append(listKeys(t, loc, loc.Join("data/")), listKeys(t, loc, loc.Join(store.TempDir+"/"))...) {
		if !referenced[key] {
			orphans = append(orphans, loc.ObjectURI(key))
		}
	}
	if len(orphans) == 0 && (phase == "data-written" || phase == "manifest" || (phase == "data-writing" && strings.HasPrefix(uri, "file:"))) {
		t.Errorf("a writer killed at %s left no data file: the test checks nothing", phase)
	}
	res, err := table.Cleanup(ctx, uri, table.CleanupOptions{KeepLast: len(want), Grace: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(orphans)
	if len(res.DeletedVersions) != 0 || !slices.Equal(res.DeletedFiles, orphans) {
		t.Errorf("cleanup deleted versions %v and files %v, want no version and the orphans %v",
			res.DeletedVersions, res.DeletedFiles, orphans)
	}
	if left := listKeys(t, loc, loc.Join("data/")); len(left) != len(referenced) {
		t.Errorf("after cleanup data/ holds %v, want the %d referenced files", left, len(referenced))
	}
	checkVersions(t, uri, want)
}

// checkVersions checks that the table at uri has exactly versions 1…len(want)
// and that version v reads the ids want[v-1].
func checkVersions(t *testing.T, uri string, want [][]int64) {
	t.Helper()
	ctx := context.Background()
	versions, err := table.Versions(ctx, uri)
	if len(want) == 0 {
		if err == nil && len(versions) > 0 {
			t.Fatalf("versions %v visible, want none", versions)
		}
		return
	}
	if err != nil || !slices.Equal(versions, seq(1, int64(len(want)))) {
		t.Fatalf("versions %v, %v; want 1…%d", versions, err, len(want))
	}
	for i, ids := range want {
		tb, err := table.OpenVersion(ctx, uri, int64(i+1))
		if err != nil {
			t.Fatal(err)
		}
		if got := allIDs(t, tb); !slices.Equal(got, ids) {
			t.Errorf("version %d reads %v, want %v", i+1, got, ids)
		}
		tb.Close()
	}
	if latest := open(t, uri); latest.Version() != strconv.Itoa(len(want)) {
		t.Errorf("latest version %s, want %d", latest.Version(), len(want))
	}
}

// listKeys returns the keys of the objects under prefix.
func listKeys(t *testing.T, loc *store.Location, prefix string) []string {
	t.Helper()
	objs, err := loc.List(context.Background(), prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, len(objs))
	for i, o := range objs {
		keys[i] = o.Key
	}
	return keys
}
