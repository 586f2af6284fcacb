// Package azurite runs Azurite, Microsoft's emulator of Azure Blob Storage,
// on a loopback port for tests that need a real Azure protocol peer: shared
// key signatures, conditional requests (If-Match, If-None-Match) and ETags as
// the service gives them. Azurite is a Node.js program; `make azurite`
// installs the version the Makefile pins from the npm registry into
// build/azurite, where Start looks for it. Only tests import this package.
package azurite

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
)

// Account and Key are Azurite's well-known development account and its key.
const (
	Account = "devstoreaccount1"
	Key     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// Server is a running Azurite blob service.
type Server struct {
	// Host is the address it listens on, 127.0.0.1:port.
	Host string
}

// command finds azurite-blob under build/azurite of the module holding the
// working directory.
func command() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			bin := filepath.Join(dir, "build", "azurite", "node_modules", ".bin", "azurite-blob")
			if _, err := os.Stat(bin); err != nil {
				return "", fmt.Errorf("azurite is not installed (%w): run `make azurite`", err)
			}
			return bin, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// listening is the line with which Azurite says where it listens.
var listening = regexp.MustCompile(`listens on http://(127\.0\.0\.1:\d+)`)

// Start starts Azurite's blob service on a free loopback port, keeping
// everything in memory, and stops it when t ends. Where Azurite is not
// installed the test is skipped saying so, except under CI (CI set in the
// environment), where it fails: there the Makefile has installed it.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := command()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cmd := exec.Command(bin, "--blobHost", "127.0.0.1", "--blobPort", "0", "--inMemoryPersistence",
		"--skipApiVersionCheck", "--disableTelemetry", "--silent")
	cmd.Dir = t.TempDir()    // for anything it writes beside its memory
	var said strings.Builder // what it said, for a failure to start
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", bin, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	host := make(chan string, 1)
	go func() {
		defer close(host)
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			said.WriteString(lines.Text() + "\n")
			if m := listening.FindStringSubmatch(lines.Text()); m != nil {
				host <- m[1]
				break
			}
		}
		for lines.Scan() { // keep the pipe drained
		}
	}()
	select {
	case h, ok := <-host:
		if !ok {
			t.Fatalf("%s ended without saying where it listens:\n%s", bin, said.String())
		}
		return &Server{Host: h}
	case <-time.After(time.Minute):
		t.Fatalf("%s did not say where it listens within a minute", bin)
	}
	return nil
}

// CreateContainer creates the container name.
func (s *Server) CreateContainer(t testing.TB, name string) {
	t.Helper()
	cred, err := container.NewSharedKeyCredential(Account, Key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := container.NewClientWithSharedKeyCredential(s.serviceURL()+"/"+name, cred, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), nil); err != nil {
		t.Fatalf("creating container %s: %v", name, err)
	}
}

func (s *Server) serviceURL() string { return "http://" + s.Host + "/" + Account }

// URI returns the azblob:// URI of container/prefix on this server. Requests
// are signed with Key where AZURE_STORAGE_KEY holds it (see Env).
func (s *Server) URI(container, prefix string) string {
	q := url.Values{"storage_account": {Account}, "domain": {s.Host}, "protocol": {"http"}}
	return "azblob://" + container + "/" + prefix + "?" + q.Encode()
}

// Env sets, for t, the environment under which the azure driver signs
// requests with the development account's key.
func Env(t testing.TB) {
	t.Setenv("AZURE_STORAGE_ACCOUNT", Account)
	t.Setenv("AZURE_STORAGE_KEY", Key)
}
