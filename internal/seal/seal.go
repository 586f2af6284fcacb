// Package seal makes croupier's JSON objects (table manifests, permutation
// manifests) carry a SHA-256 of their own bytes, so that a reader can tell an
// object as written from one a bit flip, a truncation or a careless edit has
// changed, before it trusts a single field of it.
//
// A sealed object is a JSON object whose last member is "sha256", the
// lowercase hex SHA-256 of every byte before the comma that introduces it:
//
//	{"format":2,…,"files":[…],"sha256":"<64 hex digits>"}
//
// followed by a newline.
// The digest covers the bytes as stored, not a re-encoding, so checking it
// depends on no JSON encoder's choices. SHA-256 rather than a faster
// non-cryptographic hash (xxh64, CRC-32C): it is in the standard library,
// hardware accelerated on amd64 and arm64 (far faster than the store delivers
// a manifest), and collision resistant, so that equal digests mean equal
// objects (a commit compares digests to learn whether a manifest is its own).
package seal

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Field is the name of the member that holds the digest. Structs decoded
// from sealed objects declare it (as `json:"sha256,omitempty"`), since
// croupier's decoders refuse unknown fields.
const Field = "sha256"

const (
	head = `,"` + Field + `":"`
	tail = `"}`
	// trailerLen is the length of the sealing trailer: head, digest, tail.
	trailerLen = len(head) + 2*sha256.Size + len(tail)
)

// Sum returns the lowercase hex SHA-256 of b.
func Sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// IsSum reports whether s is a digest as Sum writes it: 64 lowercase hex
// digits.
func IsSum(s string) bool {
	return len(s) == 2*sha256.Size && strings.Trim(s, "0123456789abcdef") == ""
}

// JSON seals obj, the encoding of a JSON object with at least one member and
// without a "sha256" member: it replaces the closing brace (and the
// whitespace around it) with the digest member, a closing brace and a
// newline.
func JSON(obj []byte) []byte {
	body := bytes.TrimRight(obj, ws)
	body = bytes.TrimRight(body[:len(body)-1], ws) // the closing brace
	out := append(body[:len(body):len(body)], head...)
	return append(append(append(out, Sum(body)...), tail...), '\n')
}

const ws = " \t\r\n"

// Check reports whether data (a JSON object, possibly followed by one
// newline) ends in a seal, and fails if that seal does not match the bytes
// before it. An object that does not end in a seal is not checked: the
// caller decides, by its format version, whether it must have one.
func Check(data []byte) (sealed bool, err error) {
	data = bytes.TrimSuffix(data, []byte("\n"))
	n := len(data)
	if n < trailerLen || !bytes.HasPrefix(data[n-trailerLen:], []byte(head)) {
		return false, nil
	}
	want := data[n-trailerLen+len(head) : n-len(tail)]
	if !bytes.HasSuffix(data, []byte(tail)) {
		return true, fmt.Errorf("its %s member is not the last", Field)
	}
	if got := Sum(data[:n-trailerLen]); got != string(want) {
		return true, fmt.Errorf("its content does not match its %s (%.16s…, content hashes to %.16s…): it changed after it was written", Field, want, got)
	}
	return true, nil
}
