package s3

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DefaultTokenFile is where the driver tells workloads to mount their projected ServiceAccount
// token (the Secret's AWS_WEB_IDENTITY_TOKEN_FILE) unless configured otherwise.
const DefaultTokenFile = "/var/run/secrets/cosi.kube-cosi.io/serviceaccount/token"

// ServiceAccountAuth enables authenticationType ServiceAccount: each such BucketAccess gets an IAM
// role that only tokens of its Kubernetes ServiceAccount, issued by the cluster for Audience, can
// assume (AssumeRoleWithWebIdentity), with the same policy a key of the access would have.
// docs/drivers/s3.md describes the setup.
type ServiceAccountAuth struct {
	// Issuer is the cluster's ServiceAccount token issuer, the kube-apiserver's
	// --service-account-issuer: https://host[/path], without a port. The object store's IAM
	// service must be able to fetch Issuer/.well-known/openid-configuration and the JWKS it names.
	// Required.
	Issuer string
	// Audience is the audience of the tokens workloads present (their projected token volume's
	// audience); empty means the driver's name. An audience of the API server (the issuer,
	// https://kubernetes.default.svc[.cluster.local]) is refused: every Pod's API token has it.
	Audience string
	// IssuerThumbprints are the hex SHA-1 thumbprints of the certificate at the top of the
	// issuer's TLS chain, for an issuer whose certificate no public CA signed. Empty lets the IAM
	// service find it (Versity and AWS verify the issuer against public CAs then).
	IssuerThumbprints []string
	// STSEndpoint is the STS endpoint URL workloads exchange their token at
	// (AWS_ENDPOINT_URL_STS); empty leaves it to the AWS SDK (AWS STS).
	STSEndpoint string
	// TokenFile is where workloads mount their token (AWS_WEB_IDENTITY_TOKEN_FILE); empty means
	// DefaultTokenFile.
	TokenFile string
}

// apiServerAudiences are the audiences clusters commonly give the API server (--api-audiences;
// the default is the issuer, refused as well): EKS's and kubeadm-style clusters'. The driver
// cannot read the real ones: it has no Kubernetes credentials (the charts mount the token into the
// sidecar only), and the issuer's documents do not list them. kubectl cosi doctor reads them from
// the API server's answer to a TokenRequest and fails on a driver audience among them; this list
// is what the driver can refuse on its own.
var apiServerAudiences = []string{"https://kubernetes.default.svc", "https://kubernetes.default.svc.cluster.local",
	"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}

// check validates a and fills in its defaults; name is the driver's name.
func (a *ServiceAccountAuth) check(name string) error {
	u, err := url.Parse(a.Issuer)
	switch {
	case a.Issuer == "":
		return errors.New("s3: ServiceAccount authentication needs the cluster's issuer URL")
	case err != nil || u.Scheme != "https" || u.Host == "" || u.Port() != "" || u.User != nil || u.RawQuery != "" ||
		u.Fragment != "" || strings.HasSuffix(a.Issuer, "/"):
		// The IAM API's rules for an OIDC provider URL; the issuer is compared with the tokens' iss
		// character by character, so a trailing slash would never match a provider without one.
		return fmt.Errorf("s3: the issuer URL %q must be https://host[/path], without a port, query or trailing slash "+
			"(an OIDC provider URL of the IAM API)", a.Issuer)
	}
	for _, t := range a.IssuerThumbprints {
		if len(t) != 40 || strings.Trim(strings.ToLower(t), "0123456789abcdef") != "" {
			return fmt.Errorf("s3: issuer thumbprint %q is not 40 hex digits (the SHA-1 of a certificate)", t)
		}
	}
	if a.Audience == "" {
		a.Audience = name
	}
	if a.Audience == a.Issuer || slices.Contains(apiServerAudiences, a.Audience) {
		// The token the kubelet mounts into every Pod (kube-api-access) is for these, and
		// workloads send it to the API server and to whoever asks for one: it would open the roles.
		return fmt.Errorf("s3: the ServiceAccount audience %q is an audience of the API server (its --api-audiences "+
			"default to the issuer): every Pod's API token would open the roles; use an audience of its own, such as "+
			"the driver's name", a.Audience)
	}
	if a.TokenFile == "" {
		a.TokenFile = DefaultTokenFile
	}
	return nil
}

// WebIdentityTrust is what a role of a ServiceAccount access trusts: tokens of Issuer for
// Audience whose subject is Subject.
type WebIdentityTrust struct {
	// Issuer is the OIDC provider's URL, https://host[/path].
	Issuer string
	// Audience is the one audience the tokens must name.
	Audience string
	// Thumbprints pin the issuer's certificate (see ServiceAccountAuth.IssuerThumbprints).
	Thumbprints []string
	// Subject is the ServiceAccount's token subject, system:serviceaccount:<namespace>:<name>.
	Subject string
}

// RoleAccounts is implemented by account back-ends that map a Kubernetes ServiceAccount to a
// backend identity: an IAM role that the ServiceAccount's tokens assume. The driver serves
// authenticationType ServiceAccount only with one. Implementations must be idempotent.
type RoleAccounts interface {
	// GrantRole creates the role accountID if missing, trusting exactly trust, sets its access to
	// exactly grants, and returns its ARN. It returns AlreadyExists when accountID exists with
	// another trust or grant, as a key account, or was not created by the driver.
	GrantRole(ctx context.Context, accountID string, trust WebIdentityTrust, grants []bucketGrant) (roleARN string,
		err error)
	// RevokeRole deletes the role's policy and the role. An unknown role is already revoked.
	RevokeRole(ctx context.Context, accountID string) error
}

// subjectPrefix starts the subject of every ServiceAccount token (Kubernetes'
// serviceaccount.ServiceAccountUsernamePrefix).
const subjectPrefix = "system:serviceaccount:"

// dnsLabel and dnsSubdomain are Kubernetes' rules for namespace names (RFC 1123 labels) and
// ServiceAccount names (RFC 1123 subdomains).
var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
)

// serviceAccountSubject returns the token subject of sa, or InvalidArgument naming the field that
// is missing or no Kubernetes name. The subject goes into the role's trust policy: a name that
// Kubernetes would not accept never gets there.
func serviceAccountSubject(sa *cosiproto.ServiceAccount) (string, error) {
	ns, name := sa.GetNamespace(), sa.GetName()
	switch {
	case sa == nil:
		return "", status.Error(codes.InvalidArgument,
			"service_account is required for ServiceAccount authentication")
	case len(ns) > 63 || !dnsLabel.MatchString(ns):
		return "", status.Errorf(codes.InvalidArgument,
			"service_account.namespace %q is not a namespace name (an RFC 1123 label)", ns)
	case len(name) > 253 || !dnsSubdomain.MatchString(name):
		return "", status.Errorf(codes.InvalidArgument,
			"service_account.name %q is not a ServiceAccount name (an RFC 1123 subdomain)", name)
	}
	return subjectPrefix + ns + ":" + name, nil
}
