package localenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/issuer"
)

// demoFiles are applied in this order, from examples/ (examples/azure/ but the namespace for the
// Azure driver); the claim and access names are theirs.
var demoFiles = []string{
	"namespace.yaml",
	"bucketclass.yaml",
	"bucketaccessclass.yaml",
	"bucketclaim.yaml",
	"bucketaccess.yaml",
}

// demoFile is the path of a demo file for the environment's driver.
func demoFile(env *Env, repoRoot, f string) string {
	if env.opts.Driver == DriverAzure && f != "namespace.yaml" {
		return filepath.Join(repoRoot, "examples", "azure", f)
	}
	return filepath.Join(repoRoot, "examples", f)
}

const (
	demoNamespace = "cosi-demo"
	demoClaim     = "photos"
	demoAccess    = "photos-writer"
	demoSecret    = "photos-creds"
	// The keyless part of the demo (ServiceAccount authentication), with the issuer: its file,
	// and the ServiceAccount, BucketAccess and Secret the file names.
	keylessFile   = "bucketaccess-serviceaccount.yaml"
	keylessSA     = "photos-app"
	keylessAccess = "photos-app"
	keylessSecret = "photos-app-creds"
)

// RunOptions configure Run.
type RunOptions struct {
	Options
	// Demo applies the demo from examples/ and uses its credentials.
	Demo bool
	// ExitAfterDemo stops after the demo instead of waiting until the context ends.
	ExitAfterDemo bool
	// IssuerAddress, when set, is an address of this machine's interfaces on which to publish the
	// ServiceAccount issuer, for every host that reaches it (cosi-local's --issuer-address); empty,
	// the issuer is on an address of a network namespace that no other host reaches (dev/issuer).
	IssuerAddress string
}

// Run is cosi-local (make run): it starts the environment (reusing the data in opts.Dir),
// applies the demo from examples/ (classes, a BucketClaim, a BucketAccess), shows the Secret COSI
// wrote, uses its credentials to put and read back an object, and stays up until ctx ends. It
// reports to out, and problems while stopping to errOut.
func Run(ctx context.Context, opts RunOptions, out, errOut io.Writer) error {
	start := time.Now()
	var err error
	for _, p := range []*string{&opts.Dir, &opts.RepoRoot, &opts.BinDir} {
		if *p, err = filepath.Abs(*p); err != nil {
			return err
		}
	}
	if _, statErr := os.Stat(filepath.Join(opts.Dir, "etcd", "member")); statErr == nil {
		fmt.Fprintf(out, "Starting COSI locally, reusing the data in %s\n", opts.Dir)
	} else {
		fmt.Fprintf(out, "Starting COSI locally; data and logs go to %s\n", opts.Dir)
	}
	opts.Progress = func(step string, took time.Duration) { fmt.Fprintf(out, "  ✓ %-70s %6.1fs\n", step, took.Seconds()) }
	loaded := opts.Issuer == nil
	if err := runIssuer(&opts, out); err != nil {
		return err
	}
	if loaded && opts.Issuer != nil {
		defer func() {
			if err := opts.Issuer.Close(); err != nil {
				fmt.Fprintln(errOut, "cosi-local: closing the ServiceAccount issuer:", err)
			}
		}()
	}
	env, err := Start(ctx, opts.Options)
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(out, "\nStopping COSI, the object store and the API server (data kept in "+opts.Dir+")")
		if err := env.Stop(); err != nil {
			fmt.Fprintln(errOut, "cosi-local: stopping:", err)
		}
	}()
	if opts.Issuer != nil {
		stop, err := PublishIssuer(ctx, opts.Issuer, out)
		if err != nil {
			return err
		}
		defer stop()
		fmt.Fprintf(out, "ServiceAccount authentication: issuer %s published on port %d while COSI runs "+
			"(its path, CA and address in %s)\n", opts.Issuer.URL, issuer.Port, filepath.Join(opts.Dir, "issuer"))
	}
	fmt.Fprintf(
		out,
		"COSI is running (%.1fs). kubectl --kubeconfig %s get crd\n",
		time.Since(start).Seconds(),
		env.Kubeconfig,
	)

	if opts.Demo {
		if err := runDemo(ctx, env, opts.RepoRoot, out); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		fmt.Fprintf(out, "\nDemo done %.1fs after start.\n", time.Since(start).Seconds())
	}
	printNext(out, env, opts.RepoRoot, opts.Dir)
	if opts.ExitAfterDemo {
		return nil
	}
	<-ctx.Done()
	return nil
}

// Demo is what make run does once COSI is up: it applies the demo from repoRoot's examples/ (the
// namespace cosi-demo, the classes, the BucketClaim photos and the BucketAccess photos-writer),
// waits until they are provisioned, shows the Secret photos-creds and uses its credentials. The
// runnable docs (test/docs/runnable) start from this state, as a reader who ran make run does.
func Demo(ctx context.Context, env *Env, repoRoot string, out io.Writer) error {
	return runDemo(ctx, env, repoRoot, out)
}

// runDemo applies the demo, waits until its claim and access are provisioned, shows the Secret
// and uses its credentials.
func runDemo(ctx context.Context, env *Env, repoRoot string, out io.Writer) error {
	fmt.Fprintln(out, "\nDemo: a bucket and credentials for an app, from examples/")
	if err := applyDemo(ctx, env, repoRoot, out); err != nil {
		return err
	}
	if err := waitDemoProvisioned(ctx, env, out); err != nil {
		return err
	}
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: demoNamespace, Name: demoSecret}, secret); err != nil {
		return err
	}
	printSecret(out, secret)
	if err := putAndGet(ctx, secret, out); err != nil {
		return err
	}
	if env.opts.Issuer == nil || env.opts.Driver != DriverS3 || env.opts.Store != StoreVersity {
		return nil
	}
	return keylessDemo(ctx, env, repoRoot, out)
}

// runIssuer sets up ServiceAccount authentication for make run, unless opts has an issuer
// already or its driver and store have none: an issuer front whose path and CA are kept in
// opts.Dir/issuer. Where the machine cannot publish one, it says why and goes on without.
func runIssuer(opts *RunOptions, out io.Writer) error {
	if opts.Issuer != nil || (opts.Driver != "" && opts.Driver != DriverS3) ||
		(opts.Store != "" && opts.Store != StoreVersity) {
		return nil
	}
	front, err := issuer.Load(filepath.Join(opts.Dir, "issuer"), opts.IssuerAddress)
	if errors.Is(err, issuer.ErrUnavailable) {
		fmt.Fprintf(out, "ServiceAccount authentication: off: %v\n", err)
		return nil
	}
	if err != nil {
		return err
	}
	if e := front.Exposure(); e != "" {
		fmt.Fprintf(out, "ServiceAccount authentication: %s, as --issuer-address asks\n", e)
	}
	opts.Issuer = front
	return nil
}

// PublishIssuer serves the front until ctx ends or stop is called, and returns once it listens:
// what make run does while it runs (and test/docs/runnable, which runs as make run).
// A front published on an address of the machine's (--issuer-address) shares port 443 with the
// other processes' fronts there: while one publishes its issuer (a test), it waits.
func PublishIssuer(ctx context.Context, front *issuer.Front, out io.Writer) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	listening, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- front.Serve(ctx, func(ctx context.Context) error {
			close(listening)
			<-ctx.Done()
			return nil
		})
	}()
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			fmt.Fprintf(out, "publishing the ServiceAccount issuer: %v\n", err)
		}
	}
	select {
	case <-listening:
		return stop, nil
	case <-time.After(2 * time.Second):
		fmt.Fprintf(out, "  (waiting for port %d: another process publishes its issuer there)\n", issuer.Port)
	}
	select {
	case <-listening:
		return stop, nil
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("publishing the ServiceAccount issuer: %w", err)
	}
}

// keylessDemo is the demo's ServiceAccount authentication: it applies examples/
// bucketaccess-serviceaccount.yaml (a class of authenticationType ServiceAccount, the
// ServiceAccount photos-app, an access of it to the demo's claim), shows the Secret (a role, no
// key), and with a token of the ServiceAccount from the TokenRequest API, as the kubelet projects
// into a Pod, exchanges it for the role (AssumeRoleWithWebIdentity) and puts and reads an object.
func keylessDemo(ctx context.Context, env *Env, repoRoot string, out io.Writer) error {
	fmt.Fprintln(out, "\nKeyless: an access for a ServiceAccount, no key (authenticationType ServiceAccount)")
	path := filepath.Join(repoRoot, "examples", keylessFile)
	objs, err := ApplyFile(ctx, env.Client, path)
	if err != nil {
		return err
	}
	var names []string
	for _, o := range objs {
		names = append(names, strings.ToLower(o.GetKind())+"/"+o.GetName())
	}
	fmt.Fprintf(out, "  applied %-35s %s\n", filepath.Join("examples", keylessFile), strings.Join(names, ", "))
	step := time.Now()
	access := &cosiapi.BucketAccess{}
	if err := waitProvisioned(ctx, out, env.Client, types.NamespacedName{Namespace: demoNamespace, Name: keylessAccess},
		access, func() []metav1.Condition { return access.Status.Conditions }); err != nil {
		return err
	}
	fmt.Fprintf(out, "  ✓ BucketAccess %s/%s Provisioned %6.1fs\n", demoNamespace, keylessAccess,
		time.Since(step).Seconds())
	secret := &corev1.Secret{}
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: demoNamespace, Name: keylessSecret},
		secret); err != nil {
		return err
	}
	printSecret(out, secret)
	audience := env.opts.DriverName
	if audience == "" {
		audience = DriverName
	}
	token, err := env.ServiceAccountToken(ctx, demoNamespace, keylessSA, audience)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "cosi-demo-token")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte(token), 0o600); err != nil {
		return err
	}
	creds, err := WebIdentityCredentials(secret, file)
	if err != nil {
		return err
	}
	s3c, bucket, err := S3ClientWith(secret, creds)
	if err != nil {
		return err
	}
	key, body := "hello-keyless.txt", "hello from a ServiceAccount, "+time.Now().Format(time.RFC3339)
	if err := putAndRead(ctx, s3c, bucket, key, body); err != nil {
		return fmt.Errorf("with a token of ServiceAccount %s/%s: %w", demoNamespace, keylessSA, err)
	}
	fmt.Fprintf(out, "\n  ✓ with a token of ServiceAccount %s/%s and no key: put s3://%s/%s and read it back: %q\n",
		demoNamespace, keylessSA, bucket, key, body)
	fmt.Fprintf(out, "    (the token, for audience %s, exchanged at %s for temporary credentials of the role)\n",
		audience, secret.Data[cosiapi.SecretKeyS3STSEndpointURL])
	return nil
}

// applyDemo applies demoFiles from examples/, in order.
func applyDemo(ctx context.Context, env *Env, repoRoot string, out io.Writer) error {
	for _, f := range demoFiles {
		path := demoFile(env, repoRoot, f)
		objs, err := ApplyFile(ctx, env.Client, path)
		if err != nil {
			return err
		}
		var names []string
		for _, o := range objs {
			names = append(names, strings.ToLower(o.GetKind())+"/"+o.GetName())
		}
		rel, _ := filepath.Rel(repoRoot, path)
		fmt.Fprintf(out, "  applied %-35s %s\n", rel, strings.Join(names, ", "))
	}
	return nil
}

// waitDemoProvisioned waits until the demo's claim, then its access, are provisioned.
func waitDemoProvisioned(ctx context.Context, env *Env, out io.Writer) error {
	step := time.Now()
	claim := &cosiapi.BucketClaim{}
	if err := waitProvisioned(
		ctx,
		out,
		env.Client,
		types.NamespacedName{Namespace: demoNamespace, Name: demoClaim},
		claim,
		func() []metav1.Condition { return claim.Status.Conditions },
	); err != nil {
		return err
	}
	fmt.Fprintf(
		out,
		"  ✓ BucketClaim %s/%s Provisioned: Bucket %s, bucket %q in the object store %6.1fs\n",
		demoNamespace,
		demoClaim,
		claim.Status.BoundBucketName,
		bucketID(ctx, env.Client, claim.Status.BoundBucketName),
		time.Since(step).Seconds(),
	)
	step = time.Now()
	access := &cosiapi.BucketAccess{}
	if err := waitProvisioned(
		ctx,
		out,
		env.Client,
		types.NamespacedName{Namespace: demoNamespace, Name: demoAccess},
		access,
		func() []metav1.Condition { return access.Status.Conditions },
	); err != nil {
		return err
	}
	fmt.Fprintf(
		out,
		"  ✓ BucketAccess %s/%s Provisioned: account %s %6.1fs\n",
		demoNamespace,
		demoAccess,
		access.Status.AccountID,
		time.Since(step).Seconds(),
	)
	return nil
}

// printSecret shows the Secret's keys, the secret key masked.
func printSecret(out io.Writer, secret *corev1.Secret) {
	fmt.Fprintf(out, "\n  Secret %s/%s (what a Pod gets with envFrom):\n", secret.Namespace, secret.Name)
	keys := make([]string, 0, len(secret.Data))
	for k := range secret.Data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := string(secret.Data[k])
		switch k {
		case cosiapi.SecretKeyS3SecretAccessKey:
			v = "****** (" + fmt.Sprint(len(v)) + " characters)"
		case cosiapi.SecretKeyAzureSASToken:
			v = maskSignature(v)
		}
		fmt.Fprintf(out, "    %-28s %s\n", k, v)
	}
}

// maskSignature is a SAS token with its signature masked.
func maskSignature(token string) string {
	base, query, _ := strings.Cut(token, "?")
	var parts []string
	for _, p := range strings.Split(query, "&") {
		if strings.HasPrefix(p, "sig=") {
			p = "sig=******"
		}
		parts = append(parts, p)
	}
	return base + "?" + strings.Join(parts, "&")
}

// putAndGet puts an object with the Secret's credentials and reads it back.
func putAndGet(ctx context.Context, secret *corev1.Secret, out io.Writer) error {
	if string(secret.Data[cosiapi.SecretKeyProtocol]) == string(cosiapi.ProtocolAzure) {
		return putAndGetBlob(ctx, secret, out)
	}
	s3c, bucket, err := S3Client(secret)
	if err != nil {
		return err
	}
	key := "hello.txt"
	body := "hello from COSI, " + time.Now().Format(time.RFC3339)
	if err := putAndRead(ctx, s3c, bucket, key, body); err != nil {
		return fmt.Errorf("with the Secret's credentials: %w", err)
	}
	fmt.Fprintf(out, "\n  ✓ with the Secret's credentials: put s3://%s/%s and read it back: %q\n", bucket, key, body)
	return nil
}

// putAndRead puts body as bucket/key and reads it back.
func putAndRead(ctx context.Context, s3c *awss3.Client, bucket, key, body string) error {
	if _, err := s3c.PutObject(
		ctx,
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(body)},
	); err != nil {
		return fmt.Errorf("putting s3://%s/%s: %w", bucket, key, err)
	}
	obj, err := s3c.GetObject(ctx, &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return fmt.Errorf("reading s3://%s/%s back: %w", bucket, key, err)
	}
	got, err := io.ReadAll(obj.Body)
	obj.Body.Close()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, []byte(body)) {
		return fmt.Errorf("read back %q, wrote %q", got, body)
	}
	return nil
}

// waitProvisioned waits until obj's Provisioned condition is True, printing failures as they
// appear.
func waitProvisioned(
	ctx context.Context,
	out io.Writer,
	c client.Client,
	key types.NamespacedName,
	obj client.Object,
	conditions func() []metav1.Condition,
) error {
	deadline := time.Now().Add(2 * time.Minute)
	lastMessage := ""
	for time.Now().Before(deadline) {
		if err := c.Get(ctx, key, obj); err == nil {
			if cond := apimeta.FindStatusCondition(conditions(), cosiapi.ConditionProvisioned); cond != nil {
				if cond.Status == "True" {
					return nil
				}
				if cond.Message != lastMessage {
					fmt.Fprintf(out, "    %s: %s: %s\n", key, cond.Reason, cond.Message)
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

func printNext(out io.Writer, env *Env, repoRoot, dir string) {
	rel := func(p string) string {
		if r, err := filepath.Rel(mustGetwd(), p); err == nil && !strings.HasPrefix(r, "..") {
			return r
		}
		return p
	}
	kc := rel(env.Kubeconfig)
	more := fmt.Sprintf("kubectl --kubeconfig %[1]s apply -f %[2]s/bucketaccess-multi.yaml    (more in %[2]s/README.md)",
		kc, rel(filepath.Join(repoRoot, "examples")))
	if env.opts.Driver == DriverAzure {
		more = fmt.Sprintf("kubectl --kubeconfig %s get secret -n cosi-demo photos-creds "+
			"-o jsonpath='{.data.AZURE_STORAGE_SAS_TOKEN}' | base64 -d    (docs/drivers/azure.md)", kc)
	}
	fmt.Fprintf(out, `
Try next:
  kubectl --kubeconfig %[1]s get bucketclaims,bucketaccesses -A      (bin/kubectl is built by make)
  kubectl --kubeconfig %[1]s get buckets -o wide
  %[2]s
  kubectl --kubeconfig %[1]s delete bucketaccess -n cosi-demo photos-writer   (revokes the credentials)
Object store: %[3]s
Logs: %[4]s/log/
Stop with Ctrl-C; the next make run keeps the buckets and objects. Start fresh: rm -rf %[4]s
`, kc, more, storeSummary(env, rel), rel(dir))
}

// storeSummary says where the object store listens and where its admin credentials are.
func storeSummary(env *Env, rel func(string) string) string {
	switch {
	case env.Store != nil:
		return fmt.Sprintf(
			"S3 %s, IAM %s, root credentials in %s",
			env.Store.S3Endpoint,
			env.Store.IAMEndpoint,
			rel(env.Store.RootEnvFile()),
		)
	case env.RGW != nil:
		return fmt.Sprintf("Ceph RGW %s, admin credentials in %s", env.RGW.Endpoint, rel(env.RGW.AdminEnvFile()))
	case env.Azurite != nil:
		return fmt.Sprintf("Azurite Blob service %s, account key in %s", env.Azurite.Endpoint,
			rel(env.Azurite.AccountEnvFile()))
	}
	return "none"
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

// putAndGetBlob puts a blob with the Secret's SAS token and reads it back.
func putAndGetBlob(ctx context.Context, secret *corev1.Secret, out io.Writer) error {
	c, err := BlobContainerClient(secret)
	if err != nil {
		return err
	}
	name := "hello.txt"
	body := "hello from COSI, " + time.Now().Format(time.RFC3339)
	if _, err := c.NewBlockBlobClient(name).UploadBuffer(ctx, []byte(body), nil); err != nil {
		return fmt.Errorf("putting blob %s with the Secret's SAS token: %w", name, err)
	}
	resp, err := c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return fmt.Errorf("reading blob %s back: %w", name, err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if !bytes.Equal(got, []byte(body)) {
		return fmt.Errorf("read back %q, wrote %q", got, body)
	}
	u, _, _ := strings.Cut(c.URL(), "?")
	fmt.Fprintf(out, "\n  ✓ with the Secret's SAS token: put %s/%s and read it back: %q\n", u, name, got)
	return nil
}
