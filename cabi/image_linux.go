//go:build linux

package main

import (
	"bufio"
	"os"
	"reflect"
	"strconv"
	"strings"
	"syscall"

	"github.com/croupier-data/croupier/core/errcode"
)

// The library's own image in resident memory.
//
// Loading libcroupier.so runs the init functions of every package it links
// (storage SDKs, gRPC, protobuf registries: over 400 of them), which touch
// code and read-only data all over its 70 MB, and a kernel that keeps the
// file in large page-cache folios maps a whole folio, up to 2 MiB, for each
// page touched: a process that had loaded the library held 58 to 61 MiB of
// it resident (40 when the file was read from disk afresh), all of it
// counted against the memory bound of a read in that process. So once those
// inits have run, the library drops the resident pages of its read-only
// mappings that hold no private copies (not its relocated data), as the
// kernel drops clean file pages under memory pressure, after asking that
// they not be mapped by huge pages; a page is mapped again from the page
// cache when it is next used. A full shuffle of wide rows in one process
// then held 38 MiB of the library at its peak, where it held 60
// (docs/tuning.md, "memory_budget is a bound").
func init() { _, _ = releaseImage() }

// imageMapping is one mapping of the library's file, from /proc/self/smaps.
type imageMapping struct {
	start, end uintptr
	writable   bool
	rss        int64 // bytes resident
	anonymous  int64 // bytes of private copies (relocated data): never dropped
}

// releaseImage drops the resident pages of the read-only mappings of the
// file that holds this code that hold no private copies, and returns how
// many bytes of mappings it dropped.
func releaseImage() (int64, error) {
	maps, err := imageMappings()
	if err != nil {
		return 0, err
	}
	var dropped int64
	for _, m := range maps {
		if m.writable || m.anonymous > 0 {
			continue
		}
		n := m.end - m.start
		// Without MADV_NOHUGEPAGE a page used again may bring its whole
		// folio back; its failure (a kernel without THP) changes nothing.
		_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, m.start, n, syscall.MADV_NOHUGEPAGE)
		if _, _, e := syscall.Syscall(syscall.SYS_MADVISE, m.start, n, syscall.MADV_DONTNEED); e != 0 {
			return dropped, errcode.Wrap(e, errcode.Internal, "release library image", "")
		}
		dropped += int64(n)
	}
	return dropped, nil
}

// imageMappings returns the mappings of the file whose mapping holds
// releaseImage's code: none where that is not a file.
func imageMappings() ([]imageMapping, error) {
	const op = "read library mappings"
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, "/proc/self/smaps")
	}
	defer f.Close()
	pc := reflect.ValueOf(releaseImage).Pointer()
	var all []imageMapping
	var files []string // device and inode of each of all
	self := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		if key, ok := strings.CutSuffix(fields[0], ":"); ok {
			if len(all) > 0 && len(fields) >= 2 {
				addField(&all[len(all)-1], key, fields[1])
			}
			continue
		}
		m, file, ok := parseMapping(fields)
		if !ok {
			continue
		}
		if m.start <= pc && pc < m.end && file != "" {
			self = file
		}
		all, files = append(all, m), append(files, file)
	}
	if err := sc.Err(); err != nil {
		return nil, errcode.Wrap(err, errcode.Internal, op, "/proc/self/smaps")
	}
	var out []imageMapping
	for i, m := range all {
		if self != "" && files[i] == self {
			out = append(out, m)
		}
	}
	return out, nil
}

// parseMapping reads the first line of a mapping in smaps: its range,
// whether it is writable, and its file's device and inode ("" for none).
func parseMapping(fields []string) (imageMapping, string, bool) {
	if len(fields) < 5 {
		return imageMapping{}, "", false
	}
	lo, hi, ok := strings.Cut(fields[0], "-")
	if !ok {
		return imageMapping{}, "", false
	}
	start, err1 := strconv.ParseUint(lo, 16, 64)
	end, err2 := strconv.ParseUint(hi, 16, 64)
	if err1 != nil || err2 != nil {
		return imageMapping{}, "", false
	}
	m := imageMapping{start: uintptr(start), end: uintptr(end), writable: strings.Contains(fields[1], "w")}
	file := ""
	if fields[4] != "0" {
		file = fields[3] + " " + fields[4]
	}
	return m, file, true
}

// addField sets the counter of m that key names (in kB) from value.
func addField(m *imageMapping, key, value string) {
	kb, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return
	}
	switch key {
	case "Rss":
		m.rss = kb << 10
	case "Anonymous":
		m.anonymous = kb << 10
	}
}
