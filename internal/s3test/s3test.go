// Package s3test runs a real S3 server for tests: versitygw (github.com/versity/versitygw,
// Apache-2.0) with its posix backend, on 127.0.0.1 and a free port, data in t.TempDir(). The
// binary is built from the Go module proxy into the user cache directory the first time (about
// two minutes; `make s3server` does the same), or taken from $WEIGHTFS_S3_SERVER. It is test
// support only: nothing outside tests imports it.
package s3test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Version is the versitygw release the tests run.
const Version = "v1.8.0"

var (
	serverOnce sync.Once
	serverBin  string
	serverErr  error
)

// Binary returns the versitygw binary, building it once if needed. Concurrent test
// processes serialise the build with an flock beside the cache directory.
func Binary(t testing.TB) string {
	t.Helper()
	serverOnce.Do(func() {
		if p := os.Getenv("WEIGHTFS_S3_SERVER"); p != "" {
			serverBin = p
			return
		}
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir := filepath.Join(base, "weightfs-s3", "versitygw-"+Version)
		bin := filepath.Join(dir, "versitygw")
		if _, err := os.Stat(bin); err == nil {
			serverBin = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			serverErr = err
			return
		}
		lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			serverErr = err
			return
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			serverErr = err
			return
		}
		if _, err := os.Stat(bin); err == nil { // another process built it meanwhile
			serverBin = bin
			return
		}
		// What the build does goes to stderr as it happens (the modules it downloads, each
		// package it compiles: -v), so that two silent minutes do not look like a hang.
		fmt.Fprintf(os.Stderr, "building the test S3 server versitygw %s into %s (once; about 2 minutes; `make s3server` does it ahead)\n", Version, dir)
		start := time.Now()
		cmd := exec.Command("go", "install", "-v", "github.com/versity/versitygw/cmd/versitygw@"+Version)
		cmd.Dir = os.TempDir() // outside this module: `go install pkg@version` builds it alone
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			serverErr = fmt.Errorf("build versitygw %s (go install -v github.com/versity/versitygw/cmd/versitygw@%s; its output is above): %v", Version, Version, err)
			return
		}
		fmt.Fprintf(os.Stderr, "built the test S3 server %s in %s\n", bin, time.Since(start).Round(time.Second))
		serverBin = bin
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	return serverBin
}

// Server is one running versitygw.
type Server struct {
	t         testing.TB
	bin       string
	dir       string
	Addr      string // 127.0.0.1:port
	Access    string
	Secret    string
	cmd       *exec.Cmd
	exited    chan struct{}
	logPath   string
	stoppedAt bool
}

// Start starts a server for this test; it is stopped when the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	var key [12]byte
	rand.Read(key[:])
	s := &Server{
		t: t, bin: Binary(t), dir: t.TempDir(),
		Access: "wfs" + hex.EncodeToString(key[:4]), Secret: hex.EncodeToString(key[:]),
	}
	for _, d := range []string{"data", "iam"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = l.Addr().String()
	l.Close()
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) Start() {
	s.t.Helper()
	s.logPath = filepath.Join(s.dir, "server.log")
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd = exec.Command(s.bin, "--port", s.Addr, "--iam-dir", filepath.Join(s.dir, "iam"), "--quiet",
		"posix", filepath.Join(s.dir, "data"))
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.Access, "ROOT_SECRET_KEY="+s.Secret)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start versitygw: %v", err)
	}
	logf.Close()
	s.exited = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		cmd.Wait()
		close(done)
	}(s.cmd, s.exited)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + s.Addr + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-s.exited:
			out, _ := os.ReadFile(s.logPath)
			s.t.Fatalf("versitygw exited at start:\n%s", out)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("versitygw not answering on %s after 30s", s.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stoppedAt = false
}

// Stop ends the server (it may be started again with Start, on the same port and data).
func (s *Server) Stop() {
	if s.cmd == nil || s.stoppedAt {
		return
	}
	s.stoppedAt = true
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

func (s *Server) Endpoint() string { return "http://" + s.Addr }

// SetEnv points this test process's AWS variables at the server.
func (s *Server) SetEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ENDPOINT_URL", s.Endpoint())
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
	// A test that takes the credentials away must not send the chain to 169.254.169.254.
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// ObjectDir is the directory that holds the objects of bucket under key prefix: the posix
// backend keeps each object as a plain file at DATA/bucket/key, so tests can read what was
// stored byte for byte.
func (s *Server) ObjectDir(bucket, prefix string) string {
	return filepath.Join(s.dir, "data", bucket, filepath.FromSlash(prefix))
}
