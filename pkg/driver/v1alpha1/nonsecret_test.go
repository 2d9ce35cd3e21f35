package v1alpha1

import (
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestNonSecretKeysAreWhatTheMappingShows keeps NonSecretKeys true to mapCredentials: a value under
// a listed key lands only in fields without cosi_secret, a value under any other key the adapter
// reads only in cosi_secret fields, and every field without cosi_secret holds a listed key's value
// or what the adapter derives (the bucket ID, the storage account of the token's URI).
func TestNonSecretKeysAreWhatTheMappingShows(t *testing.T) {
	const bucketID, account = "bc-1", "acct1"
	for _, tc := range []struct {
		protocol cosiproto.ObjectProtocol_Type
		key      string
		secrets  map[string]string // the keys read besides NonSecretKeys, all secret
	}{
		{cosiproto.ObjectProtocol_S3, CredentialsS3, map[string]string{
			S3AccessSecretKey: "secret-s3-key", S3AccessSecretKeyAlias: "secret-s3-key",
		}},
		{cosiproto.ObjectProtocol_AZURE, CredentialsAzure, map[string]string{
			AzureAccessToken: "https://" + account + ".blob.core.windows.net/bc-1?sv=x&sig=secret-sig",
		}},
		{cosiproto.ObjectProtocol_GCS, CredentialsGCS, map[string]string{
			GCSPrivateKey: "secret-private-key", GCSHMACSecret: "secret-hmac",
		}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			values := map[string]string{}
			for k, v := range tc.secrets {
				values[k] = v
			}
			var open []string
			for _, k := range NonSecretKeys()[tc.key] {
				switch k {
				case AzureExpiry:
					values[k] = "2030-01-02T03:04:05Z"
				case S3AccessKeyIDAlias: // an alias holds the same value, or the answer is ambiguous
					values[k] = "open-" + S3AccessKeyID
				default:
					values[k] = "open-" + k
				}
				open = append(open, values[k])
			}
			info, creds, err := New(nil, Options{}).mapCredentials(tc.protocol, bucketID, nil,
				map[string]*v1.CredentialDetails{tc.key: {Secrets: values}})
			if err != nil {
				t.Fatal(err)
			}
			var secretFields, openFields []string
			for _, m := range []proto.Message{info, creds} {
				walkStrings(m.ProtoReflect(), func(secret bool, v string) {
					if secret {
						secretFields = append(secretFields, v)
					} else {
						openFields = append(openFields, v)
					}
				})
			}
			for k, v := range tc.secrets {
				if slices.Contains(openFields, v) {
					t.Errorf("the value of %q, not in NonSecretKeys, is mapped to a field without cosi_secret", k)
				}
			}
			for _, v := range open {
				if slices.Contains(secretFields, v) {
					t.Errorf("%q, in NonSecretKeys, is mapped to a cosi_secret field", v)
				}
			}
			for _, v := range openFields {
				if !slices.Contains(open, v) && v != bucketID && v != account {
					t.Errorf("a field without cosi_secret holds %q, from a key NonSecretKeys does not list", v)
				}
			}
		})
	}
}

// walkStrings calls f for every non-empty string field of m, saying whether it is cosi_secret.
func walkStrings(m protoreflect.Message, f func(secret bool, v string)) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Kind() == protoreflect.StringKind && !fd.IsList() && !fd.IsMap():
			secret, _ := proto.GetExtension(fd.Options(), cosiproto.E_CosiSecret).(bool)
			f(secret, v.String())
		case fd.Message() != nil && !fd.IsList() && !fd.IsMap():
			walkStrings(v.Message(), f)
		}
		return true
	})
}
