package tests

// A real S3 server for the tests: versitygw (github.com/versity/versitygw, Apache-2.0) with
// its posix backend, on 127.0.0.1 and a free port, data in t.TempDir(). The binary is built
// from the Go module proxy into the user cache directory the first time (about two minutes;
// `make s3server` does the same), or taken from $WEIGHTFS_S3_SERVER. store/s3_server_test.go
// holds the same helper for the store's own tests.

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

const versitygwVersion = "v1.8.0"

var (
	s3ServerOnce sync.Once
	s3ServerBin  string
	s3ServerErr  error
)

// s3ServerBinary returns the versitygw binary, building it once if needed. Concurrent test
// processes serialise the build with an flock beside the cache directory.
func s3ServerBinary(t testing.TB) string {
	t.Helper()
	s3ServerOnce.Do(func() {
		if p := os.Getenv("WEIGHTFS_S3_SERVER"); p != "" {
			s3ServerBin = p
			return
		}
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir := filepath.Join(base, "weightfs-s3", "versitygw-"+versitygwVersion)
		bin := filepath.Join(dir, "versitygw")
		if _, err := os.Stat(bin); err == nil {
			s3ServerBin = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			s3ServerErr = err
			return
		}
		lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
		if err != nil {
			s3ServerErr = err
			return
		}
		defer lock.Close()
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			s3ServerErr = err
			return
		}
		if _, err := os.Stat(bin); err == nil { // another process built it meanwhile
			s3ServerBin = bin
			return
		}
		fmt.Fprintf(os.Stderr, "building the test S3 server versitygw %s into %s (once; about 2 minutes)\n", versitygwVersion, dir)
		cmd := exec.Command("go", "install", "github.com/versity/versitygw/cmd/versitygw@"+versitygwVersion)
		cmd.Dir = os.TempDir() // outside this module: `go install pkg@version` builds it alone
		cmd.Env = append(os.Environ(), "GOBIN="+dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			s3ServerErr = fmt.Errorf("build versitygw %s: %v\n%s", versitygwVersion, err, out)
			return
		}
		s3ServerBin = bin
	})
	if s3ServerErr != nil {
		t.Fatal(s3ServerErr)
	}
	return s3ServerBin
}

// s3Server is one running versitygw.
type s3Server struct {
	t         testing.TB
	bin       string
	dir       string
	addr      string // 127.0.0.1:port
	access    string
	secret    string
	cmd       *exec.Cmd
	exited    chan struct{}
	logPath   string
	stoppedAt bool
}

// startS3Server starts a server for this test; it is stopped when the test ends.
func startS3Server(t testing.TB) *s3Server {
	t.Helper()
	var key [12]byte
	rand.Read(key[:])
	s := &s3Server{
		t: t, bin: s3ServerBinary(t), dir: t.TempDir(),
		access: "wfs" + hex.EncodeToString(key[:4]), secret: hex.EncodeToString(key[:]),
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
	s.addr = l.Addr().String()
	l.Close()
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *s3Server) start() {
	s.t.Helper()
	s.logPath = filepath.Join(s.dir, "server.log")
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		s.t.Fatal(err)
	}
	s.cmd = exec.Command(s.bin, "--port", s.addr, "--iam-dir", filepath.Join(s.dir, "iam"), "--quiet",
		"posix", filepath.Join(s.dir, "data"))
	s.cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+s.access, "ROOT_SECRET_KEY="+s.secret)
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
		resp, err := http.Get("http://" + s.addr + "/")
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
			s.t.Fatalf("versitygw not answering on %s after 30s", s.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.stoppedAt = false
}

// stop ends the server (it may be started again with start, on the same port and data).
func (s *s3Server) stop() {
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

func (s *s3Server) endpoint() string { return "http://" + s.addr }

// setEnv points this test process's AWS variables at the server.
func (s *s3Server) setEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", s.access)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s.secret)
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ENDPOINT_URL", s.endpoint())
	t.Setenv("AWS_ENDPOINT_URL_S3", "")
}
