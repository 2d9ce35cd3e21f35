package v1alpha1

import (
	"fmt"
	"net/url"
	"regexp"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The S3 endpoint and region a v1alpha1 driver may leave out of its grant: the upstream sample
// driver returns only a key, and other public drivers return no region. v1alpha2 Secrets need
// both (AWS_ENDPOINT_URL, AWS_DEFAULT_REGION), and the adapter never invents them: the admin
// declares them, for one class in its parameters or for every class of the driver with the
// sidecar's flags (Options). They fill only what the driver leaves empty: the driver's own value
// wins over both, and the class's over the flag's.
const (
	// ParameterS3Endpoint is the BucketAccessClass parameter giving the S3 endpoint URL
	// (absolute, http or https) of the class's accesses when the driver returns none.
	ParameterS3Endpoint = "objectstorage.k8s.io/v1alpha1-s3-endpoint"
	// ParameterS3Region is the BucketAccessClass parameter giving the S3 region of the class's
	// accesses when the driver returns none.
	ParameterS3Region = "objectstorage.k8s.io/v1alpha1-s3-region"
)

// Flags of the sidecar that set Options.S3Endpoint and S3Region, named in the adapter's messages.
const (
	FlagS3Endpoint = "--v1alpha1-s3-endpoint"
	FlagS3Region   = "--v1alpha1-s3-region"
)

// No Azure fallback: the one field of an Azure answer that can be missing is the storage account,
// which the adapter reads from the SAS token's URI. It is the bucket's, not the driver's or the
// class's (a driver may make a storage account per bucket), so a class- or driver-wide value
// could point workloads at another bucket's account; an answer without it stays refused.

// CheckS3Endpoint accepts what a workload can use as AWS_ENDPOINT_URL: an absolute http or https
// URL with a host, and without user information (credentials in a URL would end up in every
// Secret), query or fragment.
//
// No message repeats the value, nor any part of it: it may hold a password where the URL parser
// does not see one ("user:password@host" without a scheme parses as the scheme "user"), or a token
// in a query or fragment, and the refusal goes into the BucketAccess's condition, which the tenant
// reads, and into the sidecar's log.
func CheckS3Endpoint(s string) error {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Errorf("not a URL")
	case u.User != nil:
		return fmt.Errorf("the URL has user information, which would be copied into every Secret")
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("not an absolute http or https URL (value not shown: it may hold a credential)")
	case u.Hostname() == "":
		return fmt.Errorf("the URL has no host")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Errorf("the URL has a query or fragment, which an endpoint has not (value not shown: it may " +
			"hold a credential)")
	}
	return nil
}

// regionPattern is a plausible region: letters, digits, '-', '_' and '.', at most 63, starting
// with a letter or digit (us-east-1, fsn1, garage, RegionOne, eu-central-003).
var regionPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

// CheckS3Region accepts a plausible region name.
func CheckS3Region(s string) error {
	if !regionPattern.MatchString(s) {
		return fmt.Errorf("%q is not a region (letters, digits, '-', '_' and '.', at most 63, "+
			"starting with a letter or digit)", s)
	}
	return nil
}

// Validate checks the options that the sidecar's flags set.
func (o Options) Validate() error {
	if o.S3Endpoint != "" {
		if err := CheckS3Endpoint(o.S3Endpoint); err != nil {
			return fmt.Errorf("%s: %w", FlagS3Endpoint, err)
		}
	}
	if o.S3Region != "" {
		if err := CheckS3Region(o.S3Region); err != nil {
			return fmt.Errorf("%s: %w", FlagS3Region, err)
		}
	}
	return nil
}

// s3Fallback is the endpoint and region an S3 answer without them gets, empty when nobody
// declared one.
type s3Fallback struct{ endpoint, region string }

// s3Fallback reads the class's fallback parameters, refused (INVALID_ARGUMENT, naming the
// parameter) when invalid, and completes them with the sidecar's flags. It is checked before
// anything is created (DriverGenerateBucketAccessId, and each grant before the driver is called).
func (a *Adapter) s3Fallback(params map[string]string) (s3Fallback, error) {
	out := a.fallback
	if v, ok := params[ParameterS3Endpoint]; ok {
		if err := CheckS3Endpoint(v); err != nil {
			return out, status.Errorf(codes.InvalidArgument, "BucketAccessClass parameter %s: %s", ParameterS3Endpoint, err)
		}
		out.endpoint = v
	}
	if v, ok := params[ParameterS3Region]; ok {
		if err := CheckS3Region(v); err != nil {
			return out, status.Errorf(codes.InvalidArgument, "BucketAccessClass parameter %s: %s", ParameterS3Region, err)
		}
		out.region = v
	}
	return out, nil
}
