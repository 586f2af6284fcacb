package client

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The shared config and credentials files are read by the small parser
// below rather than by an INI package: the AWS files use a simple subset of
// INI, and every package linked counts against the few that a program
// reading s3:// is to link.

// sharedFiles returns the paths of the shared config and credentials files:
// AWS_CONFIG_FILE and AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/config and
// ~/.aws/credentials.
func sharedFiles() (config, creds string) {
	config, creds = os.Getenv("AWS_CONFIG_FILE"), os.Getenv("AWS_SHARED_CREDENTIALS_FILE")
	if home, err := os.UserHomeDir(); err == nil {
		if config == "" {
			config = filepath.Join(home, ".aws", "config")
		}
		if creds == "" {
			creds = filepath.Join(home, ".aws", "credentials")
		}
	}
	return config, creds
}

// loadProfile returns the settings of profile name: those of its section of
// the config file ([profile NAME], or [default] for the default profile)
// overlaid by those of its section of the credentials file ([NAME]), as the
// AWS SDKs merge them, and whether either file has the profile. A missing
// file has no profiles.
func loadProfile(name string) (settings map[string]string, found bool, err error) {
	config, creds := sharedFiles()
	settings = map[string]string{}
	for _, f := range []struct {
		path string
		is   func(section string) bool
	}{
		{config, func(s string) bool {
			return (name == "default" && s == "default") || s == "profile "+name
		}},
		{creds, func(s string) bool { return s == name }},
	} {
		if f.path == "" {
			continue
		}
		data, err := os.ReadFile(f.path)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("reading AWS shared file: %w", err)
		}
		if parseSection(data, f.is, settings) {
			found = true
		}
	}
	return settings, found, nil
}

// parseSection adds to settings the key = value lines of the sections of
// INI text data whose names is accepts, and reports whether there was one.
// Section names have their runs of white space made one space. Keys are
// lowercased. Lines starting with '#' or ';' are comments; indented lines,
// the values of nested settings (such as "s3 =" followed by
// "  addressing_style = path"), are skipped, none of them being needed here.
// As with the AWS CLI, a '#' or ';' after a value is part of it.
func parseSection(data []byte, is func(section string) bool, settings map[string]string) (found bool) {
	in := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		raw := strings.TrimRight(sc.Text(), "\r")
		line := strings.TrimSpace(raw)
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			end := strings.LastIndexByte(line, ']')
			if end < 0 {
				in = false
				continue
			}
			in = is(strings.Join(strings.Fields(line[1:end]), " "))
			found = found || in
		case !in || raw[0] == ' ' || raw[0] == '\t':
		default:
			k, v, ok := strings.Cut(line, "=")
			if ok {
				settings[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
		}
	}
	return found
}
