package s3

import (
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/minio/minio-go/v7/pkg/credentials"
)

// credentialChain is the credential chain of the AWS CLI and SDKs, built from minio-go's
// providers and asked in this order:
//  1. the environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN;
//  2. with AWS_WEB_IDENTITY_TOKEN_FILE and AWS_ROLE_ARN (an EKS pod's IAM role for its service
//     account): STS AssumeRoleWithWebIdentity at AWS_ENDPOINT_URL_STS, else the region's STS;
//  3. the shared files: AWS_SHARED_CREDENTIALS_FILE (~/.aws/credentials) over AWS_CONFIG_FILE
//     (~/.aws/config), profile AWS_PROFILE or "default" (keys, credential_process, SSO);
//  4. with AWS_CONTAINER_CREDENTIALS_RELATIVE_URI or _FULL_URI: the container endpoint (an ECS
//     task role, EKS Pod Identity);
//  5. otherwise the EC2 instance metadata service (IMDSv2, then v1) at
//     AWS_EC2_METADATA_SERVICE_ENDPOINT or http://169.254.169.254, unless
//     AWS_EC2_METADATA_DISABLED=true.
//
// The first that has credentials signs every request and is asked again before they expire
// (role credentials are temporary). With none, requests are anonymous: a public bucket still
// reads, anything else answers 403 and errorText names the credentials.
func credentialChain(region string, getenv func(string) string, log *slog.Logger) *credentials.Credentials {
	providers := []credentials.Provider{&credentials.EnvAWS{}}
	files := &credentials.FileAWSCredentials{}
	// A role's endpoint is a local service (metadata, container agent) or STS: a short timeout
	// keeps a machine that has none of them from waiting on it.
	iam := &credentials.IAM{Region: region, Client: &http.Client{Timeout: roleTimeout}}
	switch {
	case getenv("AWS_WEB_IDENTITY_TOKEN_FILE") != "":
		iam.Endpoint = getenv("AWS_ENDPOINT_URL_STS")
		providers = append(providers, &roleProvider{iam: iam, what: "web identity (AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ROLE_ARN)", log: log}, files)
	case getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI") != "" || getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI") != "":
		providers = append(providers, files, &roleProvider{iam: iam, what: "container credentials endpoint", log: log})
	case isTrue(getenv("AWS_EC2_METADATA_DISABLED")):
		providers = append(providers, files)
	default:
		iam.Endpoint = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT")
		providers = append(providers, files, &roleProvider{iam: iam, what: "EC2 instance metadata service", log: log})
	}
	return credentials.NewChainCredentials(providers)
}

// roleTimeout bounds one request for role credentials.
const roleTimeout = 5 * time.Second

// roleRetryAfter is how long a failed role lookup is not repeated.
const roleRetryAfter = time.Minute

func isTrue(s string) bool {
	b, err := strconv.ParseBool(s)
	return err == nil && b
}

// roleProvider wraps minio-go's IAM provider (the role steps of credentialChain). The chain asks
// every provider again before each request while it has no credentials, so a failed lookup is
// remembered for roleRetryAfter: a machine with no credentials at all does not probe the
// metadata service before every request. The first failure is logged with its cause (an
// anonymous request's 403 would not say it).
type roleProvider struct {
	iam  *credentials.IAM
	what string
	log  *slog.Logger

	mu       sync.Mutex
	failedAt time.Time
	err      error
	logged   bool
}

func (p *roleProvider) RetrieveWithCredContext(cc *credentials.CredContext) (credentials.Value, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err != nil && time.Since(p.failedAt) < roleRetryAfter {
		return credentials.Value{}, p.err
	}
	v, err := p.iam.RetrieveWithCredContext(cc)
	if err != nil {
		p.failedAt, p.err = time.Now(), err
		if !p.logged && p.log != nil {
			p.logged = true
			p.log.Debug(fmt.Sprintf("S3 credentials: none from the %s: %v", p.what, err))
		}
		return credentials.Value{}, err
	}
	p.err = nil
	return v, nil
}

func (p *roleProvider) Retrieve() (credentials.Value, error) { return p.RetrieveWithCredContext(nil) }

func (p *roleProvider) IsExpired() bool { return p.iam.IsExpired() }
