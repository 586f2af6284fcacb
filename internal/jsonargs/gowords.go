package jsonargs

import "regexp"

// GoWords matches words of Go's that must never reach a user: panics, stacks
// and Go type names (Arrow's type names, int32 or list<item: float>, are the
// user's own). Tests check messages against it; python/tests/test_validation.py
// has the same list.
var GoWords = regexp.MustCompile(`panic|goroutine|Go struct|Go value|(^|\s)json: |strconv\.|sqlparser|\*[a-z]+\.[A-Z]|\*errors\.|\bmain\.[A-Z]|\[\][a-z]|map\[|interface \{|\.go:\d+`)

// quoted matches a double-quoted string as %q writes it: the user's own
// text, which a message may echo whatever it holds.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// GoWord returns the first of GoWords in msg outside its quoted strings, or "".
func GoWord(msg string) string { return GoWords.FindString(quoted.ReplaceAllString(msg, `""`)) }
