// Command cosi-local runs COSI on this machine (make run): etcd and kube-apiserver, the CRDs and
// RBAC, the Versity S3 gateway as the object store, and cosi-controller, cosi-sidecar and
// cosi-driver-s3 as processes. It then applies the demo from examples/ (classes, a BucketClaim,
// a BucketAccess), shows the Secret COSI wrote, uses its credentials to put and read back an
// object, and stays up until Ctrl-C. Everything lives under --dir; a second start reuses it.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/localenv"
)

// demoFiles are applied in this order; the claim and access names are theirs.
var demoFiles = []string{"namespace.yaml", "bucketclass.yaml", "bucketaccessclass.yaml", "bucketclaim.yaml", "bucketaccess.yaml"}

const (
	demoNamespace = "cosi-demo"
	demoClaim     = "photos"
	demoAccess    = "photos-writer"
	demoSecret    = "photos-creds"
)

func main() {
	var (
		dir        = flag.String("dir", ".local", "directory for all data and logs (kept across runs)")
		repoRoot   = flag.String("repo", ".", "the repository (CRDs, RBAC, examples)")
		binDir     = flag.String("bin", "bin", "directory of the binaries (make build)")
		s3Address  = flag.String("s3-address", "127.0.0.1:9070", "address of the S3 endpoint")
		iamAddress = flag.String("iam-address", "127.0.0.1:9071", "address of the IAM endpoint")
		demo       = flag.Bool("demo", true, "apply the demo from examples/ and use its credentials")
		exit       = flag.Bool("exit-after-demo", false, "stop after the demo instead of waiting for Ctrl-C")
	)
	flag.Parse()
	if err := run(*dir, *repoRoot, *binDir, *s3Address, *iamAddress, *demo, *exit); err != nil {
		fmt.Fprintln(os.Stderr, "cosi-local:", err)
		os.Exit(1)
	}
}

func run(dir, repoRoot, binDir, s3Address, iamAddress string, demo, exitAfterDemo bool) error {
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	for _, p := range []*string{&dir, &repoRoot, &binDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	_, statErr := os.Stat(filepath.Join(dir, "etcd", "member"))
	if statErr == nil {
		fmt.Printf("Starting COSI locally, reusing the data in %s\n", dir)
	} else {
		fmt.Printf("Starting COSI locally; data and logs go to %s\n", dir)
	}
	env, err := localenv.Start(ctx, localenv.Options{
		Dir: dir, RepoRoot: repoRoot, BinDir: binDir, S3Address: s3Address, IAMAddress: iamAddress,
		Progress: func(step string, took time.Duration) { fmt.Printf("  ✓ %-70s %6.1fs\n", step, took.Seconds()) },
	})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("\nStopping COSI, the object store and the API server (data kept in " + dir + ")")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "cosi-local: stopping:", err)
		}
	}()
	fmt.Printf("COSI is running (%.1fs). kubectl --kubeconfig %s get crd\n", time.Since(start).Seconds(), env.Kubeconfig)

	if demo {
		if err := runDemo(ctx, env, repoRoot); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Printf("\nDemo done %.1fs after start.\n", time.Since(start).Seconds())
	}
	printNext(env, repoRoot, dir)
	if exitAfterDemo {
		return nil
	}
	<-ctx.Done()
	return nil
}

func runDemo(ctx context.Context, env *localenv.Env, repoRoot string) error {
	fmt.Println("\nDemo: a bucket and credentials for an app, from examples/")
	for _, f := range demoFiles {
		path := filepath.Join(repoRoot, "examples", f)
		objs, err := localenv.ApplyFile(ctx, env.Client, path)
		if err != nil {
			return err
		}
		var names []string
		for _, o := range objs {
			names = append(names, strings.ToLower(o.GetKind())+"/"+o.GetName())
		}
		fmt.Printf("  applied examples/%-26s %s\n", f, strings.Join(names, ", "))
	}

	step := time.Now()
	claim := &cosiapi.BucketClaim{}
	if err := waitProvisioned(ctx, env.Client, types.NamespacedName{Namespace: demoNamespace, Name: demoClaim}, claim, func() []metav1.Condition { return claim.Status.Conditions }); err != nil {
		return err
	}
	fmt.Printf("  ✓ BucketClaim %s/%s Provisioned: Bucket %s, bucket %q in the object store %6.1fs\n", demoNamespace, demoClaim,
		claim.Status.BoundBucketName, bucketID(ctx, env.Client, claim.Status.BoundBucketName), time.Since(step).Seconds())
	step = time.Now()
	access := &cosiapi.BucketAccess{}
	if err := waitProvisioned(ctx, env.Client, types.NamespacedName{Namespace: demoNamespace, Name: demoAccess}, access, func() []metav1.Condition { return access.Status.Conditions }); err != nil {
		return err
	}
	fmt.Printf("  ✓ BucketAccess %s/%s Provisioned: account %s %6.1fs\n", demoNamespace, demoAccess, access.Status.AccountID, time.Since(step).Seconds())

	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: demoNamespace, Name: demoSecret}, secret); err != nil {
		return err
	}
	fmt.Printf("\n  Secret %s/%s (what a Pod gets with envFrom):\n", demoNamespace, demoSecret)
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := string(secret.Data[k])
		if k == cosiapi.SecretKeyS3SecretAccessKey {
			v = "****** (" + fmt.Sprint(len(v)) + " characters)"
		}
		fmt.Printf("    %-26s %s\n", k, v)
	}

	s3c, bucket, err := localenv.S3Client(secret)
	if err != nil {
		return err
	}
	key := "hello.txt"
	body := "hello from COSI, " + time.Now().Format(time.RFC3339)
	if _, err := s3c.PutObject(ctx, &awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)}); err != nil {
		return fmt.Errorf("putting s3://%s/%s with the Secret's credentials: %w", bucket, key, err)
	}
	out, err := s3c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("reading s3://%s/%s back: %w", bucket, key, err)
	}
	got, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, []byte(body)) {
		return fmt.Errorf("read back %q, wrote %q", got, body)
	}
	fmt.Printf("\n  ✓ with the Secret's credentials: put s3://%s/%s and read it back: %q\n", bucket, key, got)
	return nil
}

// waitProvisioned waits until obj's Provisioned condition is True, printing failures as they
// appear.
func waitProvisioned(ctx context.Context, c client.Client, key types.NamespacedName, obj client.Object, conditions func() []metav1.Condition) error {
	deadline := time.Now().Add(2 * time.Minute)
	lastMessage := ""
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, key, obj); err == nil {
			if cond := apimeta.FindStatusCondition(conditions(), cosiapi.ConditionProvisioned); cond != nil {
				if cond.Status == "True" {
					return nil
				}
				if cond.Message != lastMessage {
					fmt.Printf("    %s: %s: %s\n", key, cond.Reason, cond.Message)
					lastMessage = cond.Message
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return errors.New(key.String() + " not Provisioned after 2 minutes; see the logs in the data directory")
}

func bucketID(ctx context.Context, c client.Client, name string) string {
	b := &cosiapi.Bucket{}
	if err := c.Get(ctx, types.NamespacedName{Name: name}, b); err != nil {
		return "?"
	}
	return b.Status.BucketID
}

func printNext(env *localenv.Env, repoRoot, dir string) {
	rel := func(p string) string {
		if r, err := filepath.Rel(mustGetwd(), p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	kc := rel(env.Kubeconfig)
	fmt.Printf(`
Try next:
  kubectl --kubeconfig %[1]s get bucketclaims,bucketaccesses -A      (bin/kubectl is built by make)
  kubectl --kubeconfig %[1]s get buckets -o wide
  kubectl --kubeconfig %[1]s apply -f %[2]s/bucketaccess-multi.yaml    (more in %[2]s/README.md)
  kubectl --kubeconfig %[1]s delete bucketaccess -n cosi-demo photos-writer   (revokes the key)
Object store: S3 %[3]s, IAM %[4]s, root credentials in %[5]s
Logs: %[6]s/log/
Stop with Ctrl-C; the next make run keeps the buckets and objects. Start fresh: rm -rf %[6]s
`, kc, rel(filepath.Join(repoRoot, "examples")), env.Store.S3Endpoint, env.Store.IAMEndpoint, rel(env.Store.RootEnvFile()), rel(dir))
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}
