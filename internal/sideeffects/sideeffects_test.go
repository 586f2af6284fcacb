package sideeffects_test

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"math"
	"net/http"
	"os"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/parquet/compress"
	"go.opentelemetry.io/otel"

	_ "github.com/croupier-data/croupier"
	_ "github.com/croupier-data/croupier/core/catalog"
	_ "github.com/croupier-data/croupier/core/cmem"
	"github.com/croupier-data/croupier/core/errcode"
	"github.com/croupier-data/croupier/core/store"
	_ "github.com/croupier-data/croupier/core/table"
	_ "github.com/croupier-data/croupier/core/table/libzstd"
	_ "github.com/croupier-data/croupier/core/table/parquetio"
	_ "github.com/croupier-data/croupier/loader"
	_ "github.com/croupier-data/croupier/permutation"
	_ "github.com/croupier-data/croupier/permutation/expr"
)

// changes lists what the imports above changed in the process. It runs in
// TestMain, after every package's init and before any test: what a program
// importing croupier sees when its main starts.
func changes() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }

	// testing registers its own flags, all named test.*, before TestMain.
	flag.CommandLine.VisitAll(func(f *flag.Flag) {
		if !strings.HasPrefix(f.Name, "test.") {
			add("flag -%s registered (%s)", f.Name, f.Usage)
		}
	})
	// A program starts with one goroutine, the one running main.
	if n := runtime.NumGoroutine(); n != 1 {
		add("%d goroutines running before main, not 1", n)
	}
	codec, err := compress.GetCodec(compress.Codecs.Zstd)
	if t := reflect.TypeOf(codec); err != nil || t.PkgPath() != reflect.TypeOf(compress.Codecs.Zstd).PkgPath() {
		add("the zstd codec of arrow-go is %T (err %v), not arrow-go's own", codec, err)
	}
	if log.Writer() != os.Stderr || log.Flags() != log.LstdFlags || log.Prefix() != "" {
		add("the standard logger writes to %v with flags %d and prefix %q", log.Writer(), log.Flags(), log.Prefix())
	}
	if h := fmt.Sprintf("%T", slog.Default().Handler()); h != "*slog.defaultHandler" {
		add("slog's default handler is %s", h)
	}
	if c := http.DefaultClient; c.Transport != nil || c.Timeout != 0 || c.Jar != nil || c.CheckRedirect != nil {
		add("http.DefaultClient changed: %+v", c)
	}
	if tr, ok := http.DefaultTransport.(*http.Transport); !ok || tr.MaxIdleConns != 100 || tr.MaxIdleConnsPerHost != 0 ||
		tr.IdleConnTimeout != 90*time.Second || tr.TLSClientConfig != nil || tr.Proxy == nil {
		add("http.DefaultTransport changed: %#v", http.DefaultTransport)
	}
	for name, p := range map[string]any{"tracer": otel.GetTracerProvider(), "meter": otel.GetMeterProvider(),
		"propagator": otel.GetTextMapPropagator()} {
		if !strings.HasPrefix(fmt.Sprintf("%T", p), "*global.") {
			add("OpenTelemetry's global %s provider is %T", name, p)
		}
	}
	if os.Getenv("GOGC") == "" {
		if pct := debug.SetGCPercent(100); pct != 100 {
			add("the GC percent is %d", pct)
			debug.SetGCPercent(pct)
		}
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		if limit := debug.SetMemoryLimit(-1); limit != math.MaxInt64 {
			add("the memory limit is %d", limit)
		}
	}
	return out
}

var changed []string

func TestMain(m *testing.M) {
	changed = changes()
	os.Exit(m.Run())
}

// TestImportChangesNothing: see the package documentation.
func TestImportChangesNothing(t *testing.T) {
	for _, c := range changed {
		t.Error(c)
	}
}

// TestRemoteSchemesNeedTheirDriver: this binary links no driver, so only
// file:// and mem:// open, and a remote store's URI is refused with an
// error that names the package to import.
func TestRemoteSchemesNeedTheirDriver(t *testing.T) {
	if got := store.Schemes(); !slices.Equal(got, []string{"file", "mem"}) {
		t.Errorf("schemes %v", got)
	}
	for uri, want := range map[string]string{
		"s3://bkt/t?region=us-east-1": `s3:// needs its driver, which this program does not link in: ` +
			`import _ "github.com/croupier-data/croupier/drivers/s3" (or "github.com/croupier-data/croupier/drivers/all" for every store)`,
		"gs://bkt/t":     `import _ "github.com/croupier-data/croupier/drivers/gcs"`,
		"azblob://bkt/t": `import _ "github.com/croupier-data/croupier/drivers/azure"`,
		"ftp://host/t":   `no driver for ftp:// URIs; the schemes are file, mem (import _ "github.com/croupier-data/croupier/drivers/all"`,
	} {
		loc, err := store.Open(context.Background(), uri)
		if err == nil {
			loc.Close()
		}
		if errcode.Of(err) != errcode.InvalidArgument || err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v\nwant InvalidArgument with %s", uri, err, want)
		}
	}
	loc, err := store.Open(context.Background(), "mem://sideeffects/t")
	if err != nil {
		t.Fatal(err)
	}
	loc.Close()
}
