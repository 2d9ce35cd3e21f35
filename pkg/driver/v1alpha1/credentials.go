package v1alpha1

import (
	"net/url"
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

// mapCredentials maps the credentials of a v1alpha1 grant (credentials[protocol].secrets) to the
// v1alpha2 bucket info and credentials of the requested protocol, from which the sidecar renders
// exactly KEP-1979's Secret keys. Only the keys named in this package are read: anything else a
// driver puts in secrets is dropped, never copied into a Secret. Errors name keys, never values.
func mapCredentials(
	protocol cosiproto.ObjectProtocol_Type,
	bucketID string,
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
		return &cosiproto.ProtocolBucketInfo{
				S3: &cosiproto.S3BucketInfo{BucketName: bucketID, Endpoint: s[S3Endpoint], Region: s[S3Region]},
			},
			&cosiproto.CredentialInfo{
				S3: &cosiproto.S3Credentials{AccessKeyId: s[S3AccessKeyID], AccessSecretKey: s[S3AccessSecretKey]},
			}, nil
	case cosiproto.ObjectProtocol_AZURE:
		az := &cosiproto.AzureCredentials{AccessToken: s[AzureAccessToken]}
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
				Azure: &cosiproto.AzureBucketInfo{StorageAccount: storageAccount(s[AzureAccessToken])},
			},
			&cosiproto.CredentialInfo{
				Azure: az,
			}, nil
	case cosiproto.ObjectProtocol_GCS:
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
	return nil, nil, status.Errorf(codes.InvalidArgument, "protocol %v is not S3, AZURE or GCS", protocol)
}

// storageAccount reads the storage account from a SAS token that includes its resource URI
// (https://<account>.blob.core.windows.net/...), the only place a v1alpha1 grant carries it.
// Empty when the token is a bare query string: the sidecar then refuses the answer as incomplete.
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
