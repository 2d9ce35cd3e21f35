// Command app is the workload of the cluster tier (test/cluster): a Pod that reads a COSI
// BucketAccess Secret through envFrom, as any S3 application would (AWS_ENDPOINT_URL,
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION, BUCKET_NAME,
// AWS_S3_ADDRESSING_STYLE), and writes or reads one object.
//
//	app put KEY VALUE   writes the object, reads it back, prints "put KEY=VALUE"
//	app get KEY         prints "got KEY=VALUE"
//
// It exits 1 with the S3 error when the store refuses. hack/image builds it as the image
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

func run(ctx context.Context, op string, args []string) error {
	c := s3.New(s3.Options{
		BaseEndpoint: aws.String(os.Getenv("AWS_ENDPOINT_URL")),
		Region:       os.Getenv("AWS_DEFAULT_REGION"),
		Credentials: credentials.NewStaticCredentialsProvider(
			os.Getenv("AWS_ACCESS_KEY_ID"),
			os.Getenv("AWS_SECRET_ACCESS_KEY"),
			"",
		),
		UsePathStyle: os.Getenv("AWS_S3_ADDRESSING_STYLE") != "virtual",
	})
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
	return nil
}
