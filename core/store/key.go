package store

import (
	"fmt"
	"net/url"
	"path"
	"strings"
	"unicode/utf8"
)

// CheckKey checks that key, an object key read from a manifest or a pin
// rather than listed from the store, is a plain key that cannot name
// anything outside the folder it is taken relative to: not empty, not
// absolute, no empty, "." or ".." path elements, no backslashes, control
// characters or invalid UTF-8, and not a URI. The same holds for the key
// with its percent escapes decoded (%2e%2e is ".."), so that no store that
// decodes keys can be led elsewhere either. The error says what is wrong;
// callers classify it as errcode.Corrupt and name the object they read the
// key from.
func CheckKey(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if dec, err := url.PathUnescape(key); err == nil && dec != key {
		if err := checkKey(dec); err != nil {
			return fmt.Errorf("key %q decodes to %q: %w", key, dec, err)
		}
	}
	return nil
}

func checkKey(key string) error {
	bad := func(why string) error { return fmt.Errorf("key %q %s", key, why) }
	switch {
	case key == "":
		return bad("is empty")
	case !utf8.ValidString(key):
		return bad("is not valid UTF-8")
	case strings.HasPrefix(key, "/"):
		return bad("is absolute")
	case strings.Contains(key, "://"):
		return bad("is a URI, not a key")
	case strings.ContainsRune(key, '\\'):
		return bad("holds a backslash")
	case strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("holds a control character")
	}
	for part := range strings.SplitSeq(key, "/") {
		switch part {
		case "":
			return bad("has an empty path element")
		case ".", "..":
			return bad("has a " + part + " path element")
		}
	}
	return nil
}

// scope returns what l.Key names as Match lists it: the objects under prefix,
// and of those only the ones matching pattern when it is not empty.
func (l *Location) scope() (prefix, pattern string) {
	if i := strings.IndexAny(l.Key, "*?["); i >= 0 {
		return l.Key[:strings.LastIndex(l.Key[:i], "/")+1], l.Key
	}
	if l.Key != "" && !strings.HasSuffix(l.Key, "/") {
		return l.Key + "/", ""
	}
	return l.Key, ""
}

// Holds reports whether key is one of the objects l names, as Match would
// list them: l.Key itself, a visible object under it taken as a folder, or a
// match of it taken as a glob. Key is checked with CheckKey first.
func (l *Location) Holds(key string) error {
	if err := CheckKey(key); err != nil {
		return err
	}
	if key == l.Key && !hasGlob(l.Key) {
		return nil
	}
	prefix, pattern := l.scope()
	rest, ok := strings.CutPrefix(key, prefix)
	if ok && !hidden(rest) {
		if pattern == "" {
			return nil
		}
		if m, err := path.Match(pattern, key); err == nil && m {
			return nil
		}
	}
	return fmt.Errorf("key %q is outside %s", key, l.ObjectURI(l.Key))
}
