package localenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/credentials/stscreds"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// FieldOwner is the server-side apply field manager of objects applied from files.
const FieldOwner = "cosi-local"

// ReadManifests decodes the objects of a YAML file (several documents allowed).
func ReadManifests(path string) ([]*unstructured.Unstructured, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
}

// ApplyFile applies the objects of a YAML file with server-side apply, as `kubectl apply
// --server-side` does, and returns them.
func ApplyFile(ctx context.Context, c client.Client, path string) ([]*unstructured.Unstructured, error) {
	objs, err := ReadManifests(path)
	if err != nil {
		return nil, err
	}
	for _, u := range objs {
		// The API server's answer is decoded into u, so the objects returned are the applied ones.
		ac := client.ApplyConfigurationFromUnstructured(u)
		if err := c.Apply(ctx, ac, client.FieldOwner(FieldOwner), client.ForceOwnership); err != nil {
			return nil, fmt.Errorf("%s: applying %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
	return objs, nil
}

// S3Client returns an S3 client configured only from a BucketAccess Secret, as an application
// using the Secret's keys would be, and the bucket name from it.
func S3Client(secret *corev1.Secret) (*awss3.Client, string, error) {
	d := secret.Data
	for _, k := range []string{cosiapi.SecretKeyS3AccessKeyID, cosiapi.SecretKeyS3SecretAccessKey} {
		if len(d[k]) == 0 {
			return nil, "", fmt.Errorf("secret %s/%s has no %s", secret.Namespace, secret.Name, k)
		}
	}
	return S3ClientWith(secret, credentials.NewStaticCredentialsProvider(
		string(d[cosiapi.SecretKeyS3AccessKeyID]),
		string(d[cosiapi.SecretKeyS3SecretAccessKey]),
		"",
	))
}

// S3ClientWith is S3Client with the credentials given instead of the Secret's keys: the
// Secret's endpoint, region and addressing style, and the bucket name from it.
func S3ClientWith(secret *corev1.Secret, creds aws.CredentialsProvider) (*awss3.Client, string, error) {
	d := secret.Data
	for _, k := range []string{cosiapi.SecretKeyS3EndpointURL, cosiapi.SecretKeyS3BucketName} {
		if len(d[k]) == 0 {
			return nil, "", fmt.Errorf("secret %s/%s has no %s", secret.Namespace, secret.Name, k)
		}
	}
	region := string(d[cosiapi.SecretKeyS3Region])
	if region == "" {
		region = "us-east-1"
	}
	c := awss3.New(awss3.Options{
		BaseEndpoint: aws.String(string(d[cosiapi.SecretKeyS3EndpointURL])),
		Region:       region,
		Credentials:  creds,
		UsePathStyle: string(d[cosiapi.SecretKeyS3AddressingStyle]) != "virtual",
		// A denied request is an answer, not something to retry.
		RetryMaxAttempts:           1,
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	return c, string(d[cosiapi.SecretKeyS3BucketName]), nil
}

// WebIdentityCredentials are the credentials a workload's AWS SDK gets with the Secret of a
// ServiceAccount access: its web identity provider exchanges the ServiceAccount token in
// tokenFile (where the Pod's projected token would be; the Secret's AWS_WEB_IDENTITY_TOKEN_FILE
// says where a Pod mounts it) for the role AWS_ROLE_ARN at AWS_ENDPOINT_URL_STS, and caches them.
func WebIdentityCredentials(secret *corev1.Secret, tokenFile string) (aws.CredentialsProvider, error) {
	d := secret.Data
	if len(d[cosiapi.SecretKeyS3RoleARN]) == 0 {
		return nil, fmt.Errorf("secret %s/%s has no %s", secret.Namespace, secret.Name, cosiapi.SecretKeyS3RoleARN)
	}
	opts := sts.Options{Region: "us-east-1", RetryMaxAttempts: 1}
	if e := string(d[cosiapi.SecretKeyS3STSEndpointURL]); e != "" {
		opts.BaseEndpoint = aws.String(e)
	}
	provider := stscreds.NewWebIdentityRoleProvider(sts.New(opts), string(d[cosiapi.SecretKeyS3RoleARN]),
		stscreds.IdentityTokenFile(tokenFile))
	return aws.NewCredentialsCache(provider), nil
}

// BlobContainerClient is a client of the container a BucketAccess Secret of the Azure protocol
// opens: its AZURE_STORAGE_SAS_TOKEN is the container's URL with the SAS, all a workload needs.
// It fails at once: a refused request is an answer, not something to retry.
func BlobContainerClient(secret *corev1.Secret) (*container.Client, error) {
	token := string(secret.Data[cosiapi.SecretKeyAzureSASToken])
	if token == "" {
		return nil, fmt.Errorf("secret %s/%s has no %s", secret.Namespace, secret.Name, cosiapi.SecretKeyAzureSASToken)
	}
	c, err := container.NewClientWithNoCredential(token, &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Retry: policy.RetryOptions{MaxRetries: -1}},
	})
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %s is not a container URL with a SAS", secret.Namespace, secret.Name,
			cosiapi.SecretKeyAzureSASToken)
	}
	return c, nil
}
