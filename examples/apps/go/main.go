// Command go is the app developer guide's Go example (docs/app-developer.md): it uses a
// BucketAccess's Secret, given as environment variables (envFrom), to write an object into the
// bucket and read it back. The AWS SDK for Go v2 reads AWS_ENDPOINT_URL, AWS_DEFAULT_REGION,
// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY itself; BUCKET_NAME and AWS_S3_ADDRESSING_STYLE are
// COSI's.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func main() {
	if err := run(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return err
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.UsePathStyle = os.Getenv("AWS_S3_ADDRESSING_STYLE") == "path"
		// Checksums only where S3 requires them: not every S3-compatible store accepts the
		// SDK's default trailing checksums.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
	bucket := os.Getenv("BUCKET_NAME")
	if _, err := client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String("hello.txt"), Body: strings.NewReader("hello from Go"),
	}); err != nil {
		return err
	}
	out, err := client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String("hello.txt")})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return err
	}
	fmt.Printf("s3://%s/hello.txt: %s\n", bucket, body)
	return nil
}
