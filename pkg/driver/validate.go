package driver

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Limits on request fields. COSI never sends more: they match the limits the CRDs enforce (IDs,
// names, parameter and bucket counts), with room to spare for parameter sizes.
const (
	MaxIDLength             = 1024 // bucket_id, account_id
	MaxNameLength           = 253  // name, account_name (a Kubernetes object name or "ba-<uid>")
	MaxParameters           = 64
	MaxParameterKeyLength   = 256
	MaxParameterValueLength = 4096
	MaxBuckets              = 64 // buckets in one access request
	MaxDriverNameLength     = 63
)

// driverNameRE is the driver name format of the COSI spec (DriverGetInfoResponse.name): domain
// name notation, alphanumeric at both ends, dashes and dots between.
var driverNameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$`)

// ValidateRequest checks a request of any COSI RPC for missing required fields, invalid values and
// size limits. It returns nil, or a status error with code InvalidArgument that names the field.
// The server runs it before every handler.
func ValidateRequest(req any) error {
	var err error
	switch r := req.(type) {
	case *cosiproto.DriverGetInfoRequest:
	case *cosiproto.DriverGenerateBucketIdRequest:
		err = firstError(
			checkString("name", r.GetName(), MaxNameLength),
			checkProtocols("protocols", r.GetProtocols()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverCreateBucketRequest:
		err = firstError(
			checkString("bucket_id", r.GetBucketId(), MaxIDLength),
			checkProtocols("protocols", r.GetProtocols()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverGetBucketRequest:
		err = firstError(
			checkString("bucket_id", r.GetBucketId(), MaxIDLength),
			checkProtocols("protocols", r.GetProtocols()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverDeleteBucketRequest:
		err = firstError(
			checkString("bucket_id", r.GetBucketId(), MaxIDLength),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverGenerateBucketAccessIdRequest:
		err = firstError(
			checkString("account_name", r.GetAccountName(), MaxNameLength),
			checkAccessedBuckets(r.GetBuckets()),
			checkAccess(r.GetProtocol(), r.GetAuthenticationType(), r.GetServiceAccount()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverGrantBucketAccessRequest:
		err = firstError(
			checkString("account_id", r.GetAccountId(), MaxIDLength),
			checkAccessedBuckets(r.GetBuckets()),
			checkAccess(r.GetProtocol(), r.GetAuthenticationType(), r.GetServiceAccount()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverRevokeBucketAccessRequest:
		err = firstError(
			checkString("account_id", r.GetAccountId(), MaxIDLength),
			checkRevokedBuckets(r.GetBuckets()),
			checkAccess(r.GetProtocol(), r.GetAuthenticationType(), r.GetServiceAccount()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		err = firstError(
			checkString("account_id", r.GetAccountId(), MaxIDLength),
			checkString("credential_id", r.GetCredentialId(), MaxIDLength),
			checkAccessedBuckets(r.GetBuckets()),
			checkAccess(r.GetProtocol(), r.GetAuthenticationType(), r.GetServiceAccount()),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		err = firstError(
			checkString("account_id", r.GetAccountId(), MaxIDLength),
			checkString("credential_id", r.GetCredentialId(), MaxIDLength),
			checkParameters(r.GetParameters()))
	case *cosiproto.DriverGetBucketUsageRequest:
		err = firstError(
			checkString("bucket_id", r.GetBucketId(), MaxIDLength),
			checkParameters(r.GetParameters()))
	default:
		return status.Errorf(codes.Unimplemented, "unknown request type %T", req)
	}
	if err != nil {
		return status.Error(codes.InvalidArgument, err.Error())
	}
	return nil
}

func firstError(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func checkString(field, value string, maxLen int) error {
	if value == "" {
		return fmt.Errorf("%s is required", field)
	}
	if len(value) > maxLen {
		return fmt.Errorf("%s is longer than %d bytes", field, maxLen)
	}
	return nil
}

func checkProtocol(field string, p cosiproto.ObjectProtocol_Type) error {
	if _, known := cosiproto.ObjectProtocol_Type_name[int32(p)]; !known || p == cosiproto.ObjectProtocol_UNKNOWN {
		return fmt.Errorf("%s: %v is not a protocol (S3, AZURE or GCS)", field, p)
	}
	return nil
}

func checkProtocols(field string, protocols []cosiproto.ObjectProtocol_Type) error {
	seen := map[cosiproto.ObjectProtocol_Type]bool{}
	for i, p := range protocols {
		if err := checkProtocol(fmt.Sprintf("%s[%d]", field, i), p); err != nil {
			return err
		}
		if seen[p] {
			return fmt.Errorf("%s[%d]: %v is listed twice", field, i, p)
		}
		seen[p] = true
	}
	return nil
}

func checkParameters(params map[string]string) error {
	if len(params) > MaxParameters {
		return fmt.Errorf("parameters: %d entries, more than %d", len(params), MaxParameters)
	}
	for k, v := range params {
		if k == "" {
			return fmt.Errorf("parameters: empty key")
		}
		if len(k) > MaxParameterKeyLength {
			return fmt.Errorf("parameters: key %.32q... is longer than %d bytes", k, MaxParameterKeyLength)
		}
		if len(v) > MaxParameterValueLength {
			return fmt.Errorf("parameters[%q]: value is longer than %d bytes", k, MaxParameterValueLength)
		}
	}
	return nil
}

func checkAccessedBuckets(buckets []*cosiproto.AccessedBucket) error {
	if len(buckets) == 0 {
		return fmt.Errorf("buckets: at least one bucket is required")
	}
	if len(buckets) > MaxBuckets {
		return fmt.Errorf("buckets: %d buckets, more than %d", len(buckets), MaxBuckets)
	}
	seen := map[string]bool{}
	for i, b := range buckets {
		field := fmt.Sprintf("buckets[%d]", i)
		if err := checkString(field+".bucket_id", b.GetBucketId(), MaxIDLength); err != nil {
			return err
		}
		if seen[b.GetBucketId()] {
			return fmt.Errorf("%s.bucket_id: %q is listed twice", field, b.GetBucketId())
		}
		seen[b.GetBucketId()] = true
		if err := checkAccessModes(field+".access_modes", b.GetAccessModes()); err != nil {
			return err
		}
	}
	return nil
}

func checkAccessModes(field string, modes *cosiproto.AccessModes) error {
	requested := 0
	for name, mode := range map[string]cosiproto.AccessMode_Mode{
		"object_data":     modes.GetObjectData(),
		"object_metadata": modes.GetObjectMetadata(),
		"bucket_metadata": modes.GetBucketMetadata(),
	} {
		if _, known := cosiproto.AccessMode_Mode_name[int32(mode)]; !known {
			return fmt.Errorf("%s.%s: %v is not an access mode", field, name, mode)
		}
		if mode != cosiproto.AccessMode_UNSPECIFIED {
			requested++
		}
	}
	if requested == 0 {
		return fmt.Errorf("%s: at least one of object_data, object_metadata or bucket_metadata must be requested", field)
	}
	return nil
}

func checkRevokedBuckets(buckets []*cosiproto.DriverRevokeBucketAccessRequest_Bucket) error {
	if len(buckets) == 0 {
		return fmt.Errorf("buckets: at least one bucket is required")
	}
	if len(buckets) > MaxBuckets {
		return fmt.Errorf("buckets: %d buckets, more than %d", len(buckets), MaxBuckets)
	}
	for i, b := range buckets {
		if err := checkString(fmt.Sprintf("buckets[%d].bucket_id", i), b.GetBucketId(), MaxIDLength); err != nil {
			return err
		}
	}
	return nil
}

// checkAccess checks the protocol, the authentication type and the service account, which is
// required for SERVICE_ACCOUNT authentication and must be empty otherwise (COSI never sends it for
// KEY, so that drivers cannot come to depend on it).
func checkAccess(
	protocol cosiproto.ObjectProtocol_Type,
	auth cosiproto.AuthenticationType_Type,
	sa *cosiproto.ServiceAccount,
) error {
	if err := checkProtocol("protocol", protocol); err != nil {
		return err
	}
	switch auth {
	case cosiproto.AuthenticationType_KEY:
		if sa.GetName() != "" || sa.GetNamespace() != "" {
			return fmt.Errorf("service_account must be empty for KEY authentication")
		}
	case cosiproto.AuthenticationType_SERVICE_ACCOUNT:
		if sa.GetName() == "" || sa.GetNamespace() == "" {
			return fmt.Errorf("service_account name and namespace are required for SERVICE_ACCOUNT authentication")
		}
		if len(sa.GetName()) > MaxNameLength || len(sa.GetNamespace()) > MaxNameLength {
			return fmt.Errorf("service_account name or namespace is longer than %d bytes", MaxNameLength)
		}
	default:
		return fmt.Errorf("authentication_type: %v is not KEY or SERVICE_ACCOUNT", auth)
	}
	return nil
}

// ValidateDriverName checks a driver name against the COSI spec's format.
func ValidateDriverName(name string) error {
	if name == "" {
		return fmt.Errorf("driver name is empty")
	}
	if len(name) > MaxDriverNameLength {
		return fmt.Errorf("driver name %q is longer than %d characters", name, MaxDriverNameLength)
	}
	if !driverNameRE.MatchString(name) {
		return fmt.Errorf(
			"driver name %q is not in domain name notation (alphanumerics at both ends, dashes and dots between)",
			name,
		)
	}
	return nil
}

// ValidateGetInfoResponse checks what a driver says about itself: a valid name and at least one
// known protocol, none twice.
func ValidateGetInfoResponse(resp *cosiproto.DriverGetInfoResponse) error {
	if err := ValidateDriverName(resp.GetName()); err != nil {
		return err
	}
	if len(resp.GetSupportedProtocols()) == 0 {
		return fmt.Errorf("supported_protocols is empty: a driver supports at least one protocol")
	}
	return checkProtocols("supported_protocols", resp.GetSupportedProtocols())
}

// HasCapability tells whether a driver advertises the capability c. Values this COSI does not know
// (a newer driver's) are ignored, not refused.
func HasCapability(info *cosiproto.DriverGetInfoResponse, c cosiproto.DriverCapability_Type) bool {
	return slices.Contains(info.GetCapabilities(), c)
}

// ValidateUsageResponse checks a DriverGetBucketUsage answer: no negative count or limit.
func ValidateUsageResponse(resp *cosiproto.DriverGetBucketUsageResponse) error {
	for _, f := range []struct {
		name  string
		value int64
	}{
		{"size_bytes", resp.GetSizeBytes()}, {"object_count", resp.GetObjectCount()},
		{"max_size_bytes", resp.GetMaxSizeBytes()}, {"max_object_count", resp.GetMaxObjectCount()},
	} {
		if f.value < 0 {
			return fmt.Errorf("%s is negative (%d)", f.name, f.value)
		}
	}
	return nil
}

// BucketInfoProtocols returns the protocols present in a bucket info message, in S3, Azure, GCS
// order.
func BucketInfoProtocols(info *cosiproto.ProtocolBucketInfo) []cosiproto.ObjectProtocol_Type {
	var protocols []cosiproto.ObjectProtocol_Type
	if info.GetS3() != nil {
		protocols = append(protocols, cosiproto.ObjectProtocol_S3)
	}
	if info.GetAzure() != nil {
		protocols = append(protocols, cosiproto.ObjectProtocol_AZURE)
	}
	if info.GetGcs() != nil {
		protocols = append(protocols, cosiproto.ObjectProtocol_GCS)
	}
	return protocols
}

// ValidateBucketInfo checks the bucket information of a DriverCreateBucket or DriverGetBucket
// response: at least one protocol, each advertised by the driver, and each requested protocol
// present.
func ValidateBucketInfo(
	info *cosiproto.ProtocolBucketInfo,
	advertised, requested []cosiproto.ObjectProtocol_Type,
) error {
	got := BucketInfoProtocols(info)
	if len(got) == 0 {
		return fmt.Errorf("the response names no protocol: a bucket supports at least one")
	}
	for _, p := range got {
		if !containsProtocol(advertised, p) {
			return fmt.Errorf("the response has %v info, a protocol the driver does not advertise", p)
		}
	}
	for _, p := range requested {
		if !containsProtocol(got, p) {
			return fmt.Errorf("protocol %v was requested, the response has no %v info", p, p)
		}
	}
	return nil
}

// ValidateGrantResponse checks a DriverGrantBucketAccess response against its request: one entry
// per requested bucket with the fields workloads need for the protocol, and, for KEY
// authentication, complete credentials for the protocol; for SERVICE_ACCOUNT authentication, no
// key or token at all. The error names every problem found, each missing field included, so that a
// driver's author fixes them in one go. Messages never include credential values.
func ValidateGrantResponse(
	req *cosiproto.DriverGrantBucketAccessRequest,
	resp *cosiproto.DriverGrantBucketAccessResponse,
) error {
	byID := map[string]*cosiproto.ProtocolBucketInfo{}
	for i, b := range resp.GetBuckets() {
		if _, dup := byID[b.GetBucketId()]; dup {
			return fmt.Errorf("buckets[%d]: bucket %q is listed twice", i, b.GetBucketId())
		}
		byID[b.GetBucketId()] = b.GetBucketInfo()
	}
	var problems []string
	for _, want := range req.GetBuckets() {
		info, ok := byID[want.GetBucketId()]
		if !ok {
			problems = append(problems, fmt.Sprintf("buckets: no entry for requested bucket %q", want.GetBucketId()))
			continue
		}
		if err := checkGrantBucketInfo(req.GetProtocol(), info); err != nil {
			problems = append(problems, fmt.Sprintf("bucket %q: %s", want.GetBucketId(), err))
		}
	}
	if len(byID) != len(req.GetBuckets()) {
		problems = append(problems, fmt.Sprintf("buckets: %d entries for %d requested buckets",
			len(byID), len(req.GetBuckets())))
	}
	check := checkKeyless
	if req.GetAuthenticationType() == cosiproto.AuthenticationType_KEY {
		check = func(creds *cosiproto.CredentialInfo) error { return checkCredentials(req.GetProtocol(), creds) }
	}
	if err := check(resp.GetCredentials()); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// checkKeyless returns an error naming the first field of creds that holds a key or token: the
// answer to a ServiceAccount grant has none (its workloads authenticate as their ServiceAccount),
// and the sidecar would write it into a Secret where nobody rotates or expects one.
func checkKeyless(creds *cosiproto.CredentialInfo) error {
	s3, az, gcs := creds.GetS3(), creds.GetAzure(), creds.GetGcs()
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"s3.access_secret_key", s3.GetAccessSecretKey() != ""},
		{"s3.access_key_id", s3.GetAccessKeyId() != ""},
		{"azure.access_token", az.GetAccessToken() != ""},
		{"gcs.private_key", gcs.GetPrivateKey() != ""},
		{"gcs.hmac_secret", gcs.GetHmacSecret() != ""},
		{"gcs.hmac_access_id", gcs.GetHmacAccessId() != ""},
	} {
		if f.set {
			return fmt.Errorf("credentials.%s: a ServiceAccount grant returns no key or token", f.name)
		}
	}
	return nil
}

// ValidateRotateResponse checks a DriverRotateBucketAccessCredentials response against its
// request as ValidateGrantResponse checks a grant's, and that it names a new credential: a
// credential_id that is set and differs from the one replaced. Messages never include credential
// values.
func ValidateRotateResponse(
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
	resp *cosiproto.DriverRotateBucketAccessCredentialsResponse,
) error {
	if resp.GetCredentialId() == "" {
		return fmt.Errorf("credential_id: required")
	}
	if resp.GetCredentialId() == req.GetCredentialId() {
		return fmt.Errorf("credential_id: %q is the credential being replaced, not a new one", resp.GetCredentialId())
	}
	if req.GetAuthenticationType() != cosiproto.AuthenticationType_KEY {
		return fmt.Errorf("authentication_type: only KEY credentials rotate")
	}
	return ValidateGrantResponse(
		&cosiproto.DriverGrantBucketAccessRequest{
			AccountId: req.GetAccountId(), Buckets: req.GetBuckets(), Protocol: req.GetProtocol(),
			AuthenticationType: req.GetAuthenticationType(),
		},
		&cosiproto.DriverGrantBucketAccessResponse{Buckets: resp.GetBuckets(), Credentials: resp.GetCredentials()},
	)
}

func checkGrantBucketInfo(protocol cosiproto.ObjectProtocol_Type, info *cosiproto.ProtocolBucketInfo) error {
	switch protocol {
	case cosiproto.ObjectProtocol_S3:
		s3 := info.GetS3()
		return lacks("S3 bucket info", "it needs bucket_name, endpoint and region",
			field{"bucket_name", s3.GetBucketName()}, field{"endpoint", s3.GetEndpoint()}, field{"region", s3.GetRegion()})
	case cosiproto.ObjectProtocol_AZURE:
		return lacks("Azure bucket info", "it needs storage_account",
			field{"storage_account", info.GetAzure().GetStorageAccount()})
	case cosiproto.ObjectProtocol_GCS:
		return lacks("GCS bucket info", "it needs bucket_name", field{"bucket_name", info.GetGcs().GetBucketName()})
	}
	return nil
}

func checkCredentials(protocol cosiproto.ObjectProtocol_Type, creds *cosiproto.CredentialInfo) error {
	switch protocol {
	case cosiproto.ObjectProtocol_S3:
		s3 := creds.GetS3()
		return lacks("S3 credentials", "they need access_key_id and access_secret_key",
			field{"access_key_id", s3.GetAccessKeyId()}, field{"access_secret_key", s3.GetAccessSecretKey()})
	case cosiproto.ObjectProtocol_AZURE:
		return lacks("Azure credentials", "they need access_token",
			field{"access_token", creds.GetAzure().GetAccessToken()})
	case cosiproto.ObjectProtocol_GCS:
		g := creds.GetGcs()
		if g.GetPrivateKey() == "" && (g.GetHmacAccessId() == "" || g.GetHmacSecret() == "") {
			return fmt.Errorf("GCS credentials need private_key, or hmac_access_id and hmac_secret")
		}
	}
	return nil
}

// field is a field of an answer, by name, and its value, which messages never show.
type field struct{ name, value string }

// lacks names every empty field of what, or returns nil when none is: "S3 bucket info without
// endpoint, region (it needs bucket_name, endpoint and region)".
func lacks(what, needs string, fields ...field) error {
	var missing []string
	for _, f := range fields {
		if f.value == "" {
			missing = append(missing, f.name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%s without %s (%s)", what, strings.Join(missing, ", "), needs)
}

func containsProtocol(list []cosiproto.ObjectProtocol_Type, p cosiproto.ObjectProtocol_Type) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

// CheckParameterKeys returns InvalidArgument naming the first key of params (in sorted order) that
// is not one of known: a driver declares its class parameters with it, so that a typo in a
// BucketClass or BucketAccessClass is an error instead of a silently ignored setting.
//
//	if err := driver.CheckParameterKeys(req.GetParameters(), "region", "versioning"); err != nil {
//		return nil, err
//	}
func CheckParameterKeys(params map[string]string, known ...string) error {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(known, k) {
			return status.Errorf(codes.InvalidArgument, "parameters: unknown key %q (this driver knows %s)", k,
				strings.Join(known, ", "))
		}
	}
	return nil
}
