package sidecar

import (
	"maps"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestSecretData(t *testing.T) {
	expiry := time.Date(2027, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		protocol cosiproto.ObjectProtocol_Type
		info     *cosiproto.ProtocolBucketInfo
		creds    *cosiproto.CredentialInfo
		ca       string
		want     map[string]string
	}{
		{
			name:     "S3, every key",
			protocol: cosiproto.ObjectProtocol_S3,
			info: &cosiproto.ProtocolBucketInfo{S3: &cosiproto.S3BucketInfo{
				BucketName:      "bc-1",
				Endpoint:        "https://s3.example.com",
				Region:          "eu-1",
				AddressingStyle: cosiproto.S3AddressingStyle_VIRTUAL,
			}},
			creds: &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK", AccessSecretKey: "SK"}},
			ca:    "-----BEGIN CERTIFICATE-----",
			want: map[string]string{
				"COSI_PROTOCOL": "S3", "AWS_ENDPOINT_URL": "https://s3.example.com", "BUCKET_NAME": "bc-1",
				"AWS_DEFAULT_REGION": "eu-1", "AWS_S3_ADDRESSING_STYLE": "virtual",
				"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
				"COSI_CERTIFICATE_AUTHORITY": "-----BEGIN CERTIFICATE-----",
			},
		},
		{
			name:     "S3 info of other protocols is left out",
			protocol: cosiproto.ObjectProtocol_S3,
			info: &cosiproto.ProtocolBucketInfo{
				S3: &cosiproto.S3BucketInfo{
					BucketName: "bc-1", Endpoint: "e", Region: "r", AddressingStyle: cosiproto.S3AddressingStyle_PATH,
				},
				Gcs: &cosiproto.GcsBucketInfo{ProjectId: "p", BucketName: "other"},
			},
			creds: &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{AccessKeyId: "AK", AccessSecretKey: "SK"}},
			want: map[string]string{
				"COSI_PROTOCOL": "S3", "AWS_ENDPOINT_URL": "e", "BUCKET_NAME": "bc-1", "AWS_DEFAULT_REGION": "r",
				"AWS_S3_ADDRESSING_STYLE": "path", "AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK",
			},
		},
		{
			name:     "Azure with expiry",
			protocol: cosiproto.ObjectProtocol_AZURE,
			info:     &cosiproto.ProtocolBucketInfo{Azure: &cosiproto.AzureBucketInfo{StorageAccount: "acct"}},
			creds: &cosiproto.CredentialInfo{Azure: &cosiproto.AzureCredentials{
				AccessToken:     "sv=x&sig=y",
				ExpiryTimestamp: timestamppb.New(expiry),
			}},
			want: map[string]string{
				"COSI_PROTOCOL": "Azure", "AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_SAS_TOKEN": "sv=x&sig=y",
				"AZURE_STORAGE_SAS_TOKEN_EXPIRY_TIMESTAMP": "2027-01-02T03:04:05Z",
			},
		},
		{
			name:     "Azure without expiry has the key, empty",
			protocol: cosiproto.ObjectProtocol_AZURE,
			info:     &cosiproto.ProtocolBucketInfo{Azure: &cosiproto.AzureBucketInfo{StorageAccount: "acct"}},
			creds:    &cosiproto.CredentialInfo{Azure: &cosiproto.AzureCredentials{AccessToken: "tok"}},
			want: map[string]string{
				"COSI_PROTOCOL": "Azure", "AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_SAS_TOKEN": "tok",
				"AZURE_STORAGE_SAS_TOKEN_EXPIRY_TIMESTAMP": "",
			},
		},
		{
			name:     "GCS with service account key and HMAC",
			protocol: cosiproto.ObjectProtocol_GCS,
			info:     &cosiproto.ProtocolBucketInfo{Gcs: &cosiproto.GcsBucketInfo{ProjectId: "proj", BucketName: "b"}},
			creds: &cosiproto.CredentialInfo{Gcs: &cosiproto.GcsCredentials{
				ServiceAccountName: "sa", ClientEmail: "sa@x", ClientId: "1",
				PrivateKeyId: "kid", PrivateKey: "pk", HmacAccessId: "hid", HmacSecret: "hs",
			}},
			want: map[string]string{
				"COSI_PROTOCOL": "GCS", "PROJECT_ID": "proj", "BUCKET_NAME": "b",
				"SERVICE_ACCOUNT_NAME": "sa", "CLIENT_EMAIL": "sa@x", "CLIENT_ID": "1",
				"PRIVATE_KEY_ID": "kid", "PRIVATE_KEY": "pk", "HMAC_ACCESS_ID": "hid", "HMAC_SECRET": "hs",
			},
		},
		{
			name:     "S3 ServiceAccount authentication: bucket info and the web identity keys, no key pair",
			protocol: cosiproto.ObjectProtocol_S3,
			info: &cosiproto.ProtocolBucketInfo{S3: &cosiproto.S3BucketInfo{
				BucketName: "bc-1", Endpoint: "e", Region: "r", AddressingStyle: cosiproto.S3AddressingStyle_PATH,
			}},
			creds: &cosiproto.CredentialInfo{S3: &cosiproto.S3Credentials{
				RoleArn: "arn:aws:iam::000000000000:role/cosi/ba-1", WebIdentityTokenFile: "/var/run/token",
				StsEndpoint: "https://sts.example.com",
			}},
			want: map[string]string{
				"COSI_PROTOCOL": "S3", "AWS_ENDPOINT_URL": "e", "BUCKET_NAME": "bc-1", "AWS_DEFAULT_REGION": "r",
				"AWS_S3_ADDRESSING_STYLE": "path", "AWS_ROLE_ARN": "arn:aws:iam::000000000000:role/cosi/ba-1",
				"AWS_WEB_IDENTITY_TOKEN_FILE": "/var/run/token", "AWS_ENDPOINT_URL_STS": "https://sts.example.com",
			},
		},
		{
			name:     "ServiceAccount authentication: bucket info only",
			protocol: cosiproto.ObjectProtocol_GCS,
			info:     &cosiproto.ProtocolBucketInfo{Gcs: &cosiproto.GcsBucketInfo{ProjectId: "proj", BucketName: "b"}},
			want:     map[string]string{"COSI_PROTOCOL": "GCS", "PROJECT_ID": "proj", "BUCKET_NAME": "b"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]string{}
			for k, v := range secretData(tc.protocol, tc.info, tc.creds, tc.ca) {
				got[k] = string(v)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("keys %v\nwant %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(tc.want)))
			}
		})
	}
}

func TestBucketStatusInfo(t *testing.T) {
	got := bucketStatusInfo(&cosiproto.ProtocolBucketInfo{
		S3:    &cosiproto.S3BucketInfo{BucketName: "s3name", Endpoint: "e"},
		Azure: &cosiproto.AzureBucketInfo{StorageAccount: "acct"},
		Gcs:   &cosiproto.GcsBucketInfo{BucketName: "gcsname"},
	})
	// KEP-1979: "COSI_<PROTOCOL>_<KEY> ... e.g., COSI_S3_ENDPOINT, COSI_AZURE_STORAGE_ACCOUNT".
	want := map[string]string{
		"COSI_PROTOCOL":              "S3,Azure,GCS",
		"COSI_S3_BUCKET_NAME":        "s3name",
		"COSI_S3_ENDPOINT_URL":       "e",
		"COSI_AZURE_STORAGE_ACCOUNT": "acct",
		"COSI_GCS_BUCKET_NAME":       "gcsname",
	}
	if !maps.Equal(got, want) {
		t.Errorf("bucketStatusInfo = %v, want %v", got, want)
	}
	if bucketStatusInfo(&cosiproto.ProtocolBucketInfo{}) != nil {
		t.Error("empty info should render as nil")
	}
}
