package jsonargs

import "regexp"

// GoWords matches words of Go's that must never reach a user: panics, stacks
// and Go type names (Arrow's type names, int32 or list<item: float>, are the
// user's own). Tests check messages against it; python/tests/test_validation.py
// has the same list.
var GoWords = regexp.MustCompile(`panic|goroutine|Go struct|Go value|json: cannot|sqlparser|\*[a-z]+\.[A-Z]|\[\][a-z]|map\[|interface \{|\.go:\d+`)
