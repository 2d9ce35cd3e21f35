// Package v1alpha1profiles runs COSI v1alpha1 drivers that behave like the public ones in the wild
// (dev/v1alpha1drivers: a driver that names its accounts itself, anew on every grant; one that
// answers like the upstream sample, without endpoint or region; one that reads the v1alpha1 Bucket
// object through the Kubernetes API in deletions and revocations; one that answers INTERNAL to the
// deletion of a bucket that is gone), each around the reference v1alpha1 driver on Versity, which
// enforces the keys. Each runs behind the real sidecar (detecting the protocol by itself) and
// controller, on their generated roles, against a real kube-apiserver with the opt-in v1alpha1
// view of the Buckets installed (config/components/v1alpha1-bucket-view), through KEP-1979's
// flows: grant with a working key, revocation with the key refused, Delete and Retain, static
// import. docs/v1alpha1-drivers.md, "Known drivers", is the table these prove.
package v1alpha1profiles

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/store/versity"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/dev/v1alpha1drivers"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/drivers/v1alpha1s3"
	"github.com/kube-cosi/cosi/internal/controller"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

const (
	namespace = "profiles"
	// readerParameter is the Bucket parameter a Bucket-reading driver looks for (Scality's reads
	// the name of the store's credentials Secret there).
	readerParameter = "COSI_DRIVER_SECRET_NAME"
)

var (
	env           *testenv.Env
	sidecarConfig *rest.Config
	// readerConfig is the driver's own ServiceAccount, bound to the view's reader role only.
	readerConfig *rest.Config
)

func TestMain(m *testing.M) {
	testenv.Run(m, func(ctx context.Context, e *testenv.Env) error {
		env = e
		if err := installView(); err != nil {
			return err
		}
		if err := env.CreateNamespace(ctx, namespace); err != nil {
			return err
		}
		var err error
		if sidecarConfig, err = env.ServiceAccountConfig(ctx, "config/rbac/sidecar/role.yaml", "cosi-system",
			"cosi-sidecar"); err != nil {
			return err
		}
		if readerConfig, err = env.ServiceAccountConfig(ctx,
			"config/components/v1alpha1-bucket-view/reader-role.yaml", "cosi-system", "v1alpha1-driver"); err != nil {
			return err
		}
		controllerCfg, err := env.ServiceAccountConfig(ctx, "config/rbac/controller/role.yaml", "cosi-system",
			"cosi-controller")
		if err != nil {
			return err
		}
		env.Go(ctx, "controller", func(ctx context.Context) error {
			return controller.Run(ctx, controllerCfg,
				controller.Options{Workers: 4, MetricsAddress: "0", HealthAddress: "0"}, logr.Discard())
		})
		return nil
	})
}

// installView applies the CRDs with the kustomize component of the v1alpha1 view, as an admin's
// overlay does.
func installView() error {
	dir, err := os.MkdirTemp("", "cosi-view")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	rel := func(p string) (string, error) { return filepath.Rel(dir, filepath.Join(env.RepoRoot, p)) }
	crd, err := rel("config/crd")
	if err != nil {
		return err
	}
	view, err := rel("config/components/v1alpha1-bucket-view")
	if err != nil {
		return err
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\n"+
		"components:\n- %s\n", crd, view)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		return err
	}
	kubectl := filepath.Join(env.BinDir, "kubectl")
	rendered, err := exec.Command(kubectl, "kustomize", dir).Output()
	if err != nil {
		return fmt.Errorf("kustomize: %w", err)
	}
	kc := filepath.Join(dir, "kubeconfig")
	if err := env.WriteAdminKubeconfig(kc); err != nil {
		return err
	}
	var stderr bytes.Buffer
	apply := exec.Command(kubectl, "--kubeconfig", kc, "apply", "--server-side", "--force-conflicts", "-f", "-")
	apply.Stdin, apply.Stderr = bytes.NewReader(rendered), &stderr
	if err := apply.Run(); err != nil {
		return fmt.Errorf("applying the view: %w: %s", err, stderr.String())
	}
	return nil
}

// profile is one kind of public v1alpha1 driver.
type profile struct {
	name string
	// wrap makes the reference driver behave as the profile's drivers do.
	wrap func(*system, *v1alpha1s3.Driver) v1alpha1drivers.Server
	// accessParameters and bucketParameters are what an admin sets on the classes for such a
	// driver (docs/v1alpha1-drivers.md, "Known drivers").
	accessParameters func(*system) map[string]string
	bucketParameters map[string]string
	// check, when set, checks what is particular to the profile on a provisioned access.
	check func(t *testing.T, s *system, ba *cosiapi.BucketAccess, sec *corev1.Secret)
}

var profiles = []profile{
	{
		name: "random-account-ids",
		wrap: func(s *system, d *v1alpha1s3.Driver) v1alpha1drivers.Server {
			s.random = v1alpha1drivers.NewRandomAccounts(d)
			return s.random
		},
		check: func(t *testing.T, s *system, ba *cosiapi.BucketAccess, _ *corev1.Secret) {
			made := s.random.Made()
			msg := meta.FindStatusCondition(ba.Status.Conditions, cosiapi.ConditionProvisioned).Message
			if len(made) == 0 || !strings.Contains(msg, made[len(made)-1]) {
				t.Errorf("the Provisioned condition %q does not name the driver's account (made: %v)", msg, made)
			}
		},
	},
	{
		name: "sample-answers",
		wrap: func(_ *system, d *v1alpha1s3.Driver) v1alpha1drivers.Server {
			return v1alpha1drivers.SampleAnswers{Server: d}
		},
		accessParameters: func(s *system) map[string]string {
			return map[string]string{
				v1alpha1.ParameterS3Endpoint: s.store.S3Endpoint,
				v1alpha1.ParameterS3Region:   "us-east-1",
			}
		},
		check: func(t *testing.T, s *system, _ *cosiapi.BucketAccess, sec *corev1.Secret) {
			if got := string(sec.Data[cosiapi.SecretKeyS3EndpointURL]); got != s.store.S3Endpoint {
				t.Errorf("Secret endpoint %q, want the class's fallback %q", got, s.store.S3Endpoint)
			}
		},
	},
	{
		name: "bucket-reader",
		wrap: func(s *system, d *v1alpha1s3.Driver) v1alpha1drivers.Server {
			c, err := client.New(readerConfig, client.Options{})
			if err != nil {
				s.t.Fatal(err)
			}
			s.reader = &v1alpha1drivers.BucketReader{Server: d, Client: c, Parameter: readerParameter}
			return s.reader
		},
		bucketParameters: map[string]string{readerParameter: "store-credentials"},
	},
	{
		name: "internal-on-missing-bucket",
		wrap: func(s *system, d *v1alpha1s3.Driver) v1alpha1drivers.Server {
			s.internal = &v1alpha1drivers.InternalOnMissingBucket{Server: d}
			return s.internal
		},
	},
}

// system is one profile's driver on its own Versity, and its sidecar.
type system struct {
	t        *testing.T
	p        profile
	name     string
	endpoint string
	store    *versity.Store
	admin    *awss3.Client

	random   *v1alpha1drivers.RandomAccounts
	reader   *v1alpha1drivers.BucketReader
	internal *v1alpha1drivers.InternalOnMissingBucket

	stopSidecar func()
}

var counter atomic.Int64

func unique(prefix string) string { return fmt.Sprintf("%s-%d", prefix, counter.Add(1)) }

func newSystem(t *testing.T, p profile) *system {
	t.Helper()
	s := &system{t: t, p: p, name: fmt.Sprintf("%s.profiles.cosi.io", p.name)}
	s.endpoint, s.store = v1alpha1drivers.ServeS3Store(t, s.name,
		func(d *v1alpha1s3.Driver) v1alpha1drivers.Server { return p.wrap(s, d) })
	s.admin = awss3.New(awss3.Options{
		BaseEndpoint: aws.String(s.store.S3Endpoint), Region: "us-east-1", UsePathStyle: true,
		Credentials: credentials.NewStaticCredentialsProvider(s.store.RootAccessKey, s.store.RootSecretKey, ""),
	})
	s.startSidecar()
	return s
}

func (s *system) startSidecar() {
	s.stopSidecar = testenv.StartSidecar(s.t, sidecarConfig, testenv.SidecarOptions(s.endpoint))
}

func (s *system) bucketClass(policy cosiapi.DeletionPolicy) *cosiapi.BucketClass {
	// The reference driver deletes a bucket that holds objects only when its class says so.
	params := map[string]string{s3.ParamPurgeOnDelete: "true"}
	maps.Copy(params, s.p.bucketParameters)
	c := objects.BucketClass(unique(s.p.name), s.name, policy, objects.ClassParameters(params))
	create(s.t, c)
	return c
}

func (s *system) accessClass() *cosiapi.BucketAccessClass {
	var params map[string]string
	if s.p.accessParameters != nil {
		params = s.p.accessParameters(s)
	}
	c := objects.BucketAccessClass(unique(s.p.name), s.name, objects.AccessParameters(params))
	create(s.t, c)
	return c
}

func (s *system) bucketExists(ctx context.Context, bucket string) bool {
	_, err := s.admin.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(bucket)})
	return err == nil
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func del(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), o); client.IgnoreNotFound(err) != nil {
		t.Fatalf("deleting %s: %v", o.GetName(), err)
	}
}

func conditions(obj client.Object) []metav1.Condition {
	switch o := obj.(type) {
	case *cosiapi.BucketClaim:
		return o.Status.Conditions
	case *cosiapi.BucketAccess:
		return o.Status.Conditions
	case *cosiapi.Bucket:
		return o.Status.Conditions
	}
	return nil
}

func provisioned(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
				return err
			}
			if !meta.IsStatusConditionTrue(conditions(obj), cosiapi.ConditionProvisioned) {
				return fmt.Errorf("%s not provisioned: %+v", obj.GetName(), conditions(obj))
			}
			return nil
		})
	}
}

// secret is the access's Secret (its first claim's), as the workload reads it.
func secret(t *testing.T, ba *cosiapi.BucketAccess) *corev1.Secret {
	t.Helper()
	sec := &corev1.Secret{}
	sec.Name, sec.Namespace = ba.Spec.BucketClaims[0].AccessSecretName, ba.Namespace
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(sec), sec); err != nil {
		t.Fatal(err)
	}
	return sec
}

// keyWorks is nil when the Secret's key writes an object into the Secret's bucket on the store, as
// a workload's S3 client would.
func keyWorks(sec *corev1.Secret) error {
	c, bucket, err := localenv.S3Client(sec)
	if err != nil {
		return err
	}
	_, err = c.PutObject(context.Background(), &awss3.PutObjectInput{
		Bucket: aws.String(bucket), Key: aws.String("workload"), Body: strings.NewReader("data"),
	})
	if err != nil {
		return fmt.Errorf("the key of Secret %s cannot write to bucket %s: %w", sec.Name, bucket, err)
	}
	return nil
}

// grantAndRevoke creates an access to c, checks that its key works on the store, deletes the
// access and waits until the key is refused.
func (s *system) grantAndRevoke(t *testing.T, class string, c *cosiapi.BucketClaim) {
	t.Helper()
	ba := objects.BucketAccess(namespace, unique("access"), class,
		objects.Grant(c.Name, unique("creds"), objects.ReadWrite))
	create(t, ba)
	provisioned(t, ba)
	sec := secret(t, ba)
	if err := keyWorks(sec); err != nil {
		t.Fatal(err)
	}
	if s.p.check != nil {
		s.p.check(t, s, ba, sec)
	}
	del(t, ba)
	env.Gone(t, ba)
	testenv.Eventually(t, func() error {
		if keyWorks(sec) == nil {
			return errors.New("the key still works after the access was deleted")
		}
		return nil
	})
}

// Each profile through KEP-1979's flows.
func TestProfiles(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.name, func(t *testing.T) {
			s := newSystem(t, p)
			access := s.accessClass().Name
			t.Run("Delete", func(t *testing.T) {
				c := objects.BucketClaim(namespace, unique("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
				create(t, c)
				provisioned(t, c)
				bucket := c.Status.BoundBucketName
				s.grantAndRevoke(t, access, c)
				del(t, c)
				env.Gone(t, c)
				testenv.Eventually(t, func() error {
					if s.bucketExists(t.Context(), bucket) {
						return fmt.Errorf("bucket %s still exists in the store", bucket)
					}
					return nil
				})
			})
			t.Run("Retain", func(t *testing.T) {
				c := objects.BucketClaim(namespace, unique("claim"), s.bucketClass(cosiapi.DeletionPolicyRetain).Name, objects.S3)
				create(t, c)
				provisioned(t, c)
				bucket := c.Status.BoundBucketName
				s.grantAndRevoke(t, access, c)
				del(t, c)
				env.Gone(t, c)
				if !s.bucketExists(t.Context(), bucket) {
					t.Errorf("bucket %s of a Retain claim is gone from the store", bucket)
				}
			})
			t.Run("Static", func(t *testing.T) {
				// A driver that reads the Bucket object looks it up by the bucket ID: the Bucket is
				// named as the bucket it imports (docs/v1alpha1-drivers.md).
				id := unique("imported")
				if _, err := s.admin.CreateBucket(t.Context(), &awss3.CreateBucketInput{Bucket: aws.String(id)}); err != nil {
					t.Fatal(err)
				}
				c := objects.BucketClaim(namespace, unique("claim"), "", objects.S3)
				c.Spec.ExistingBucketName = id
				b := &cosiapi.Bucket{
					ObjectMeta: metav1.ObjectMeta{Name: id},
					Spec: cosiapi.BucketSpec{
						DriverName: s.name, DeletionPolicy: cosiapi.DeletionPolicyRetain, ExistingBucketID: id,
						Protocols: []cosiapi.Protocol{cosiapi.ProtocolS3}, Parameters: s.p.bucketParameters,
						BucketClaimRef: cosiapi.BucketClaimReference{Name: c.Name, Namespace: namespace},
					},
				}
				create(t, b, c)
				provisioned(t, c)
				s.grantAndRevoke(t, access, c)
				del(t, c)
				env.Gone(t, c)
				if !s.bucketExists(t.Context(), id) {
					t.Errorf("the imported bucket %s is gone from the store", id)
				}
			})
			if s.reader != nil && s.reader.Reads() == 0 {
				t.Errorf("the driver never read a Bucket through objectstorage.k8s.io/v1alpha1")
			}
		})
	}
}

// A driver that answers INTERNAL to the deletion of a bucket that is gone, after the answer to the
// deletion that removed it was lost (the sidecar stopped while the driver held it): v1alpha1
// cannot look the bucket up, so the sidecar cannot tell that answer from a store that fails, and
// retries, saying so on the Bucket (FailedDeleteBucket, the driver's message). An admin who finds
// the bucket gone in the store switches the Bucket to Retain (its one mutable field), and the
// deletion ends without another call (docs/v1alpha1-drivers.md, "Known drivers").
func TestInternalOnMissingBucketAfterALostAnswer(t *testing.T) {
	s := newSystem(t, profiles[3])
	held, release := make(chan string, 1), make(chan struct{})
	var once atomic.Bool
	s.internal.AfterDelete = func(ctx context.Context, bucket string) {
		if once.Swap(true) {
			return
		}
		held <- bucket
		select {
		case <-release:
		case <-ctx.Done():
		}
	}
	c := objects.BucketClaim(namespace, unique("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
	create(t, c)
	provisioned(t, c)
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: c.Status.BoundBucketName}}
	del(t, c)
	select {
	case <-held:
	case <-t.Context().Done():
		t.Fatal("no deletion came")
	}
	s.stopSidecar()
	close(release)
	if s.bucketExists(t.Context(), b.Name) {
		t.Fatalf("bucket %s still in the store after the driver deleted it", b.Name)
	}
	s.startSidecar()
	// The Bucket's status says so; the event too, but an event is best effort (the one the first
	// sidecar records as it stops may be dropped with its recorder, and the API server may refuse
	// one under load), so the status is what is waited for.
	const internal = "DriverDeleteBucket: Internal: v1alpha1 DriverDeleteBucket: NoSuchBucket"
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		c := meta.FindStatusCondition(b.Status.Conditions, cosiapi.ConditionProvisionFailed)
		if c == nil || c.Status != metav1.ConditionTrue || !strings.HasPrefix(c.Message, internal) {
			return fmt.Errorf("condition %s: %+v", cosiapi.ConditionProvisionFailed, c)
		}
		return nil
	})
	env.WaitForEvent(t, b, cosiapi.EventFailedDeleteBucket+": "+internal)

	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
			return err
		}
		b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain
		return env.Client.Update(t.Context(), b)
	})
	env.Gone(t, b)
	env.Gone(t, c)
}

// foreignBucket answers DriverCreateBucket ALREADY_EXISTS after someone else made a bucket of the
// same name in the store, with data in it, just before (another account on a store whose bucket
// names all accounts share; on Versity, the root account).
type foreignBucket struct {
	v1alpha1drivers.Server
	s *system // its admin client, made once the store runs
}

func (d foreignBucket) DriverCreateBucket(
	ctx context.Context, req *v1.DriverCreateBucketRequest,
) (*v1.DriverCreateBucketResponse, error) {
	if _, err := d.s.admin.CreateBucket(ctx, &awss3.CreateBucketInput{Bucket: aws.String(req.GetName())}); err == nil {
		if _, err := d.s.admin.PutObject(ctx, &awss3.PutObjectInput{
			Bucket: aws.String(req.GetName()), Key: aws.String("precious"), Body: strings.NewReader("theirs"),
		}); err != nil {
			return nil, status.Error(codes.Unavailable, err.Error())
		}
	}
	return nil, status.Errorf(codes.AlreadyExists, "bucket %s exists", req.GetName())
}

// A bucket whose creation the driver answered ALREADY_EXISTS is not this Bucket's: deleting the
// claim (Delete policy, and a class that purges what a bucket holds) leaves it, and its data, in
// the store, and says so.
func TestForeignBucketIsNotDeleted(t *testing.T) {
	p := profile{name: "foreign-bucket", wrap: func(s *system, d *v1alpha1s3.Driver) v1alpha1drivers.Server {
		return foreignBucket{Server: d, s: s}
	}}
	s := newSystem(t, p)
	c := objects.BucketClaim(namespace, unique("claim"), s.bucketClass(cosiapi.DeletionPolicyDelete).Name, objects.S3)
	create(t, c)
	testenv.Condition(t, env, c, func(c *cosiapi.BucketClaim) []metav1.Condition { return c.Status.Conditions },
		cosiapi.ConditionProvisioned, metav1.ConditionFalse, cosiapi.ReasonProvisioningFailed)
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: c.Status.BoundBucketName}}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), b); err != nil {
		t.Fatal(err)
	}
	// Marked before the failure is recorded.
	if _, ok := b.Annotations[cosiapi.AnnotationBucketNotCreated]; !ok {
		t.Errorf("Bucket %s not marked %s", b.Name, cosiapi.AnnotationBucketNotCreated)
	}
	del(t, c)
	env.Gone(t, c)
	env.Gone(t, b)
	env.WaitForEvent(t, b, cosiapi.EventBucketNotDeleted+": backend bucket")
	got, err := s.admin.GetObject(t.Context(),
		&awss3.GetObjectInput{Bucket: aws.String(b.Name), Key: aws.String("precious")})
	if err != nil {
		t.Fatalf("the other's bucket or its data is gone after the claim was deleted: %v", err)
	}
	_ = got.Body.Close()
}
