// Command app is the workload of the cluster tier (test/cluster): a Pod that reads a COSI
// BucketAccess Secret through envFrom, as any S3 application would, and writes or reads one
// object.
//
// With a key in the Secret (authenticationType Key: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
// AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, BUCKET_NAME, AWS_S3_ADDRESSING_STYLE) it signs with
// that key. Without one (authenticationType ServiceAccount: AWS_ROLE_ARN,
// AWS_WEB_IDENTITY_TOKEN_FILE, AWS_ENDPOINT_URL_STS instead of the key) it takes the AWS SDK's
// default configuration and credential chain (config.LoadDefaultConfig) and nothing else: the
// chain finds the role and the Pod's projected ServiceAccount token in the environment and
// exchanges the token at the STS endpoint (AssumeRoleWithWebIdentity), as an unmodified
// application on EKS does.
//
//	app put KEY VALUE   writes the object, reads it back, prints "put KEY=VALUE"
//	app get KEY         prints "got KEY=VALUE"
//
// Without a key, each also prints, on a second line, where the default chain found credentials:
// "credentials: <provider> (temporary: true)".
//
// It exits 1 with the S3 or STS error when the store refuses. hack/image builds it as the image
// cosi-test-app (not part of make images).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	if len(os.Args) < 3 || (os.Args[1] == "put" && len(os.Args) < 4) {
		fmt.Fprintln(os.Stderr, "usage: app put KEY VALUE | app get KEY")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, "app:", err)
		os.Exit(1)
	}
}

// client is an S3 client from the environment: the static key when there is one, else the AWS
// SDK's default chain. source says which.
func client(ctx context.Context) (c *s3.Client, source string, err error) {
	pathStyle := func(o *s3.Options) { o.UsePathStyle = os.Getenv("AWS_S3_ADDRESSING_STYLE") != "virtual" }
	if os.Getenv("AWS_ACCESS_KEY_ID") != "" {
		return s3.New(s3.Options{
			BaseEndpoint: aws.String(os.Getenv("AWS_ENDPOINT_URL")),
			Region:       os.Getenv("AWS_DEFAULT_REGION"),
			Credentials: credentials.NewStaticCredentialsProvider(
				os.Getenv("AWS_ACCESS_KEY_ID"),
				os.Getenv("AWS_SECRET_ACCESS_KEY"),
				"",
			),
		}, pathStyle), "", nil
	}
	// Everything from the environment: the region, AWS_ENDPOINT_URL for S3, and the web identity
	// provider (AWS_ROLE_ARN, AWS_WEB_IDENTITY_TOKEN_FILE) with its STS client at
	// AWS_ENDPOINT_URL_STS.
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("the AWS SDK's default configuration: %w", err)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil {
		return nil, "", fmt.Errorf("the AWS SDK's default credential chain: %w", err)
	}
	return s3.NewFromConfig(cfg, pathStyle), fmt.Sprintf("%s (temporary: %v)", creds.Source, creds.CanExpire), nil
}

func run(ctx context.Context, op string, args []string) error {
	c, source, err := client(ctx)
	if err != nil {
		return err
	}
	bucket, key := os.Getenv("BUCKET_NAME"), args[0]
	if bucket == "" {
		return fmt.Errorf("BUCKET_NAME is not set: is the COSI Secret in envFrom?")
	}
	if op == "put" {
		if _, err := c.PutObject(
			ctx,
			&s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(args[1])},
		); err != nil {
			return fmt.Errorf("put %s/%s: %w", bucket, key, err)
		}
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: &key})
	if err != nil {
		return fmt.Errorf("get %s/%s: %w", bucket, key, err)
	}
	defer out.Body.Close()
	v, err := io.ReadAll(out.Body)
	if err != nil {
		return err
	}
	if op == "put" && string(v) != args[1] {
		return fmt.Errorf("read back %q after writing %q", v, args[1])
	}
	fmt.Printf("%s %s=%s\n", map[string]string{"put": "put", "get": "got"}[op], key, v)
	if source != "" {
		fmt.Printf("credentials: %s\n", source)
	}
	return nil
}
