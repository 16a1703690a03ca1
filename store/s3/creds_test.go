package s3

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
)

// noAWSCredentials clears every place the credential chain looks (and points the shared files
// at paths that do not exist), so that a test gives credentials in exactly one place. The
// instance metadata service is disabled: no test may send a request off the loopback.
func noAWSCredentials(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY", "AWS_SECRET_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME",
		"AWS_ENDPOINT_URL_STS", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
		"AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "AWS_EC2_METADATA_SERVICE_ENDPOINT"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "no-credentials"))
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "no-config"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// credsRoundTrip initialises a store at url, commits a version and reads it back through
// a second, read-only handle: every request of both signed with the credentials the chain
// found.
func credsRoundTrip(t *testing.T, url string) {
	t.Helper()
	if err := Init(url, Config{RetryFor: 1}, nil); err != nil {
		t.Fatalf("init: %v", err)
	}
	w := openTestStore(t, url, store.Options{})
	files := newTestModel(7, 20_000).files(t)
	commitTree(t, w, 1, files)
	r := openTestStore(t, url, store.Options{ReadOnly: true})
	for p, b := range files {
		mustEqualBytes(t, p, readWhole(t, r, 1, p), b)
	}
}

func writeFile(t *testing.T, path, text string) string {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestS3CredentialsSharedFiles: with nothing in the environment, the credentials come from the
// shared credentials file (AWS_SHARED_CREDENTIALS_FILE), from its profile named by
// AWS_PROFILE, and from a profile of the config file (AWS_CONFIG_FILE), as the AWS CLI finds
// them; a profile with wrong keys is refused with a message that names the credentials.
func TestS3CredentialsSharedFiles(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	noAWSCredentials(t)
	dir := t.TempDir()
	good := fmt.Sprintf("aws_access_key_id = %s\naws_secret_access_key = %s\n", srv.Access, srv.Secret)
	bad := "aws_access_key_id = " + srv.Access + "\naws_secret_access_key = wrong\n"
	creds := writeFile(t, filepath.Join(dir, "credentials"), "[default]\n"+good+"\n[trainer]\n"+good+"\n[stale]\n"+bad)
	config := writeFile(t, filepath.Join(dir, "config"), "[profile ci]\nregion = us-east-1\n"+good)

	t.Run("default", func(t *testing.T) {
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
		credsRoundTrip(t, testURL(t))
	})
	t.Run("profile", func(t *testing.T) {
		only := writeFile(t, filepath.Join(t.TempDir(), "credentials"), "[default]\n"+bad+"\n[trainer]\n"+good)
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", only)
		t.Setenv("AWS_PROFILE", "trainer")
		credsRoundTrip(t, testURL(t))
	})
	t.Run("config-profile", func(t *testing.T) {
		t.Setenv("AWS_CONFIG_FILE", config)
		t.Setenv("AWS_PROFILE", "ci")
		credsRoundTrip(t, testURL(t))
	})
	t.Run("wrong-profile", func(t *testing.T) {
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
		t.Setenv("AWS_PROFILE", "stale")
		err := Init(testURL(t), Config{RetryFor: 1}, nil)
		if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "check the credentials") {
			t.Fatalf("init with a profile's wrong secret: %v, want an HTTP 403 error naming the credentials", err)
		}
	})
}

// fakeIMDS serves the EC2 instance metadata credentials of one role (IMDSv2: a token first),
// counting the requests.
func fakeIMDS(t *testing.T, access, secret string) (*httptest.Server, *atomic.Int64) {
	var hits atomic.Int64
	const token = "imds-token"
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /latest/api/token", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprint(w, token)
	})
	mux.HandleFunc("GET /latest/meta-data/iam/security-credentials/", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if r.Header.Get("X-aws-ec2-metadata-token") != token {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		fmt.Fprint(w, "trainer-role\n")
	})
	mux.HandleFunc("GET /latest/meta-data/iam/security-credentials/trainer-role", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		json.NewEncoder(w).Encode(map[string]any{"Code": "Success", "Type": "AWS-HMAC", "AccessKeyId": access,
			"SecretAccessKey": secret, "Token": "", "Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv, &hits
}

// TestS3CredentialsInstanceRole: on an EC2 instance (here a fake metadata service on the
// loopback, at AWS_EC2_METADATA_SERVICE_ENDPOINT as the AWS SDKs let tests put it) the
// credentials are the instance role's.
func TestS3CredentialsInstanceRole(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	noAWSCredentials(t)
	imds, hits := fakeIMDS(t, srv.Access, srv.Secret)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	credsRoundTrip(t, testURL(t))
	if hits.Load() == 0 {
		t.Fatal("the instance metadata service was not asked")
	}
}

// TestS3CredentialsWebIdentity: in an EKS pod with an IAM role for its service account
// (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN) the token is exchanged at STS
// (AssumeRoleWithWebIdentity; here a fake STS on the loopback at AWS_ENDPOINT_URL_STS) for the
// role's credentials.
func TestS3CredentialsWebIdentity(t *testing.T) {
	srv := s3test.Start(t)
	srv.SetEnv(t)
	noAWSCredentials(t)
	const role, jwt = "arn:aws:iam::123456789012:role/weightfs-trainer", "eyJ.pod-token.sig"
	var calls atomic.Int64
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "AssumeRoleWithWebIdentity" ||
			r.Form.Get("RoleArn") != role || r.Form.Get("WebIdentityToken") != jwt {
			http.Error(w, "bad request: "+r.Form.Encode(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, `<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
<AssumeRoleWithWebIdentityResult><Credentials><AccessKeyId>%s</AccessKeyId><SecretAccessKey>%s</SecretAccessKey>
<Expiration>%s</Expiration></Credentials></AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>`,
			srv.Access, srv.Secret, time.Now().Add(time.Hour).UTC().Format(time.RFC3339))
	}))
	t.Cleanup(sts.Close)
	t.Setenv("AWS_WEB_IDENTITY_TOKEN_FILE", writeFile(t, filepath.Join(t.TempDir(), "token"), jwt))
	t.Setenv("AWS_ROLE_ARN", role)
	t.Setenv("AWS_ENDPOINT_URL_STS", sts.URL)
	credsRoundTrip(t, testURL(t))
	if calls.Load() == 0 {
		t.Fatal("STS was not asked")
	}
}

// TestS3CredentialsRoleProbe: without any credentials the metadata service is asked once, not
// before every request, and not at all when AWS_EC2_METADATA_DISABLED=true.
func TestS3CredentialsRoleProbe(t *testing.T) {
	noAWSCredentials(t)
	var hits atomic.Int64
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	t.Cleanup(imds.Close)
	for _, disabled := range []string{"", "true"} {
		hits.Store(0)
		var logged []string
		env := map[string]string{"AWS_EC2_METADATA_SERVICE_ENDPOINT": imds.URL, "AWS_EC2_METADATA_DISABLED": disabled}
		c := credentialChain("us-east-1", func(k string) string { return env[k] }, logtest.New(func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }))
		for range 5 {
			if v, err := c.GetWithContext(nil); err != nil || v.AccessKeyID != "" {
				t.Fatalf("disabled=%q: %+v, %v; want anonymous", disabled, v, err)
			}
		}
		want, wantLogs := int64(1), 1
		if disabled != "" {
			want, wantLogs = 0, 0
		}
		if hits.Load() < want || hits.Load() > 2*want || len(logged) != wantLogs {
			t.Errorf("disabled=%q: %d metadata requests for 5 lookups, logged %q; want one lookup (2 requests at most), logged once", disabled, hits.Load(), logged)
		}
	}
}
