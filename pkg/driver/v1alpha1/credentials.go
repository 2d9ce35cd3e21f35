package v1alpha1

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// azureExpiryFormat is how the upstream v1alpha1 sidecar parsed expiryTs (Go's time.Time String
// format); RFC 3339 is accepted too.
const azureExpiryFormat = "2006-01-02 15:04:05.999999999 -0700 MST"

// Other names v1alpha1 drivers give the S3 key, read as well as the upstream sidecar's. Each names
// one thing only: "accessKeyId" is the same word in another case, and "secretAccessKey" is what
// AWS calls the secret half of a key (IAM's CreateAccessKey, the SDKs); an S3 key has no other
// secret. Names that could mean something else (a bare "key" or "secret", a session token) or
// that are another program's convention (AWS_SECRET_ACCESS_KEY, a Secret's key, not the driver's
// word) are not read: a driver that uses them is refused with the keys it returned named.
const (
	S3AccessKeyIDAlias     = "accessKeyId"
	S3AccessSecretKeyAlias = "secretAccessKey"
)

// NonSecretKeys lists, for each credentials key (CredentialsS3, CredentialsAzure, CredentialsGCS),
// the keys of its secrets map whose values the adapter maps to fields that are not secret (not
// marked cosi_secret): key IDs, endpoint, region, expiry, the GCS service account's identity and
// project. Every other value of a v1alpha1 secrets map, under any key, is secret: cosi-sanity
// redacts it from everything it reports, as it does v1alpha2's cosi_secret fields.
func NonSecretKeys() map[string][]string {
	return map[string][]string{
		CredentialsS3:    {S3AccessKeyID, S3AccessKeyIDAlias, S3Endpoint, S3Region},
		CredentialsAzure: {AzureExpiry},
		CredentialsGCS: {GCSServiceAccountName, GCSClientEmail, GCSClientID, GCSPrivateKeyID, GCSHMACAccessID,
			GCSProjectID},
	}
}

// s3Field is one value of an S3 answer: the keys it is read from, the upstream sidecar's first.
type s3Field struct{ keys []string }

var (
	s3KeyID     = s3Field{[]string{S3AccessKeyID, S3AccessKeyIDAlias}}
	s3SecretKey = s3Field{[]string{S3AccessSecretKey, S3AccessSecretKeyAlias}}
	s3Endpoint  = s3Field{[]string{S3Endpoint}}
	s3Region    = s3Field{[]string{S3Region}}
)

// S3Keys lists, for each value of an S3 answer (key ID, secret key, endpoint, region), the
// secrets keys the adapter reads it from: the upstream sidecar's name first, then its aliases.
func S3Keys() [][]string {
	return [][]string{s3KeyID.keys, s3SecretKey.keys, s3Endpoint.keys, s3Region.keys}
}

// read returns the field's value in secrets, empty when no key holds one. Two keys with different
// values are ambiguous: the adapter takes neither, and names both keys (never the values).
func (f s3Field) read(secrets map[string]string) (string, error) {
	var value, from string
	for _, k := range f.keys {
		v := secrets[k]
		switch {
		case v == "":
		case value == "":
			value, from = v, k
		case v != value:
			return "", fmt.Errorf("%s and %s hold different values", from, k)
		}
	}
	return value, nil
}

// mapCredentials maps the credentials of a v1alpha1 grant (credentials[protocol].secrets) to the
// v1alpha2 bucket info and credentials of the requested protocol, from which the sidecar renders
// exactly KEP-1979's Secret keys. Only the keys named in this package are read: anything else a
// driver puts in secrets is dropped, never copied into a Secret. An S3 answer without endpoint or
// region gets the admin's fallback (s3Fallback), never an invented one.
//
// The answer is refused when it lacks the protocol's credentials (INTERNAL: retried, as a driver
// that answered so once may not again), and when it is incomplete or ambiguous after the
// fallbacks (INVALID_ARGUMENT: final; the same driver gives the same answer until the class, the
// sidecar's flags or the driver change). Errors list every missing value and the keys the driver
// returned: names, never values.
func (a *Adapter) mapCredentials(
	protocol cosiproto.ObjectProtocol_Type,
	bucketID string,
	params map[string]string,
	creds map[string]*v1.CredentialDetails,
) (*cosiproto.ProtocolBucketInfo, *cosiproto.CredentialInfo, error) {
	key := map[cosiproto.ObjectProtocol_Type]string{
		cosiproto.ObjectProtocol_S3:    CredentialsS3,
		cosiproto.ObjectProtocol_AZURE: CredentialsAzure,
		cosiproto.ObjectProtocol_GCS:   CredentialsGCS,
	}[protocol]
	details, ok := creds[key]
	if !ok {
		return nil, nil, status.Errorf(
			codes.Internal,
			"v1alpha1 DriverGrantBucketAccess returned no %q credentials (it returned %v)",
			key,
			sortedKeys(creds),
		)
	}
	s := details.GetSecrets()
	switch protocol {
	case cosiproto.ObjectProtocol_S3:
		fallback, err := a.s3Fallback(params)
		if err != nil {
			return nil, nil, err
		}
		return mapS3(bucketID, s, fallback)
	case cosiproto.ObjectProtocol_AZURE:
		return mapAzure(s)
	case cosiproto.ObjectProtocol_GCS:
		return mapGCS(bucketID, s)
	}
	return nil, nil, status.Errorf(codes.InvalidArgument, "protocol %v is not S3, AZURE or GCS", protocol)
}

func mapS3(
	bucketID string, s map[string]string, fallback s3Fallback,
) (*cosiproto.ProtocolBucketInfo, *cosiproto.CredentialInfo, error) {
	var ambiguous, missing []string
	read := func(f s3Field, fallback string) string {
		v, err := f.read(s)
		switch {
		case err != nil:
			ambiguous = append(ambiguous, err.Error())
		case v == "" && fallback == "":
			missing = append(missing, f.keys[0])
		case v == "":
			v = fallback
		}
		return v
	}
	keyID, secretKey := read(s3KeyID, ""), read(s3SecretKey, "")
	endpoint, region := read(s3Endpoint, fallback.endpoint), read(s3Region, fallback.region)
	if len(ambiguous) > 0 {
		return nil, nil, status.Errorf(codes.InvalidArgument,
			"v1alpha1 DriverGrantBucketAccess answered ambiguous s3 credentials: %s (the adapter takes neither; "+
				"values not shown)", strings.Join(ambiguous, "; "))
	}
	if len(missing) > 0 {
		return nil, nil, incomplete(CredentialsS3, missing, s, s3Hint(missing))
	}
	return &cosiproto.ProtocolBucketInfo{
			S3: &cosiproto.S3BucketInfo{BucketName: bucketID, Endpoint: endpoint, Region: region},
		},
		&cosiproto.CredentialInfo{
			S3: &cosiproto.S3Credentials{AccessKeyId: keyID, AccessSecretKey: secretKey},
		}, nil
}

// s3Hint says how an admin completes an answer without endpoint or region.
func s3Hint(missing []string) string {
	var params, flags []string
	for _, m := range missing {
		switch m {
		case S3Endpoint:
			params, flags = append(params, ParameterS3Endpoint), append(flags, FlagS3Endpoint)
		case S3Region:
			params, flags = append(params, ParameterS3Region), append(flags, FlagS3Region)
		}
	}
	if len(params) == 0 {
		return ""
	}
	return fmt.Sprintf("; set %s on the BucketAccessClass, or %s on the sidecar (docs/v1alpha1-drivers.md)",
		strings.Join(params, " and "), strings.Join(flags, " and "))
}

func mapAzure(s map[string]string) (*cosiproto.ProtocolBucketInfo, *cosiproto.CredentialInfo, error) {
	token := s[AzureAccessToken]
	switch account := storageAccount(token); {
	case token == "":
		return nil, nil, incomplete(CredentialsAzure, []string{AzureAccessToken}, s, "")
	case account == "":
		// The storage account is the bucket's: no class- or driver-wide fallback (fallback.go).
		return nil, nil, incomplete(CredentialsAzure, []string{"the storage account"}, s,
			"; the adapter reads it from the token's https://<account>.blob... URI, and "+AzureAccessToken+
				" is not one")
	}
	az := &cosiproto.AzureCredentials{AccessToken: token}
	if ts := s[AzureExpiry]; ts != "" {
		t, err := time.Parse(azureExpiryFormat, ts)
		if err != nil {
			if t, err = time.Parse(time.RFC3339, ts); err != nil {
				return nil, nil, status.Errorf(codes.Internal, "v1alpha1 DriverGrantBucketAccess: %s is not a time", AzureExpiry)
			}
		}
		az.ExpiryTimestamp = timestamppb.New(t)
	}
	return &cosiproto.ProtocolBucketInfo{
			Azure: &cosiproto.AzureBucketInfo{StorageAccount: storageAccount(token)},
		},
		&cosiproto.CredentialInfo{Azure: az}, nil
}

func mapGCS(bucketID string, s map[string]string) (*cosiproto.ProtocolBucketInfo, *cosiproto.CredentialInfo, error) {
	if s[GCSPrivateKey] == "" && (s[GCSHMACAccessID] == "" || s[GCSHMACSecret] == "") {
		return nil, nil, incomplete(CredentialsGCS,
			[]string{fmt.Sprintf("%s, or %s and %s", GCSPrivateKey, GCSHMACAccessID, GCSHMACSecret)}, s, "")
	}
	return &cosiproto.ProtocolBucketInfo{Gcs: &cosiproto.GcsBucketInfo{BucketName: bucketID, ProjectId: s[GCSProjectID]}},
		&cosiproto.CredentialInfo{Gcs: &cosiproto.GcsCredentials{
			ServiceAccountName: s[GCSServiceAccountName],
			ClientEmail:        s[GCSClientEmail],
			ClientId:           s[GCSClientID],
			PrivateKeyId:       s[GCSPrivateKeyID],
			PrivateKey:         s[GCSPrivateKey],
			HmacAccessId:       s[GCSHMACAccessID],
			HmacSecret:         s[GCSHMACSecret],
		}}, nil
}

// incomplete is the refusal of an answer that lacks values (INVALID_ARGUMENT, final): it names every
// missing value and the keys the driver did return, with a hint of what completes it.
func incomplete(protocol string, missing []string, secrets map[string]string, hint string) error {
	return status.Errorf(codes.InvalidArgument,
		"v1alpha1 DriverGrantBucketAccess answered %s credentials without %s (it returned %s%s)",
		protocol, strings.Join(missing, ", "), returnedKeys(secrets), hint)
}

// maxListedKeys bounds the keys named in a message: a driver's answer is not ours to size.
const maxListedKeys = 16

// plainKey is a key name shown as it is; any other is quoted, so that a driver's odd key cannot
// forge text in a condition.
var plainKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// returnedKeys lists the keys of secrets that hold a value, for messages: names, never values.
func returnedKeys(secrets map[string]string) string {
	var keys []string
	for _, k := range sortedKeys(secrets) {
		if secrets[k] == "" {
			continue
		}
		if !plainKey.MatchString(k) {
			k = fmt.Sprintf("%.64q", k)
		}
		keys = append(keys, k)
	}
	switch {
	case len(keys) == 0:
		return "no key with a value"
	case len(keys) > maxListedKeys:
		return fmt.Sprintf("%s and %d more", strings.Join(keys[:maxListedKeys], ", "), len(keys)-maxListedKeys)
	}
	return strings.Join(keys, ", ")
}

// storageAccount reads the storage account from a SAS token that includes its resource URI
// (https://<account>.blob.core.windows.net/...), the only place a v1alpha1 grant carries it.
// Empty when the token is a bare query string.
func storageAccount(token string) string {
	u, err := url.Parse(token)
	if err != nil || u.Host == "" {
		return ""
	}
	account, rest, ok := strings.Cut(u.Hostname(), ".")
	if !ok || !strings.HasPrefix(rest, "blob.") {
		return ""
	}
	return account
}
