// Package e2e tests the whole of COSI as users see it: the real cosi-controller, cosi-sidecar
// and cosi-driver-s3 binaries as processes, a real kube-apiserver and etcd, and the Versity S3
// gateway enforcing the issued credentials (internal/localenv, the same environment as make
// run). Each test follows one control flow of KEP-1979 and asserts what a user can observe:
// conditions and events, the Secret's keys, and what the issued credentials can do in the store.
package e2e

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/internal/localenv"
	"github.com/kube-cosi/cosi/internal/objects"
	"github.com/kube-cosi/cosi/internal/testenv"
)

var (
	env   *localenv.Env
	waits *testenv.Env // Eventually-style waits on env's client
	admin *awss3.Client
)

func TestMain(m *testing.M) {
	testenv.RunSystem(m, localenv.Options{Verbosity: 2}, func(_ context.Context, e *localenv.Env) error {
		env, waits = e, &testenv.Env{APIServer: e.APIServer}
		admin = s3.NewS3Client(
			env.Store.S3Endpoint,
			"us-east-1",
			credentials.NewStaticCredentialsProvider(env.Store.RootAccessKey, env.Store.RootSecretKey, ""),
			nil,
		)
		return nil
	})
}

// Names and objects.

func unique(prefix string) string { return prefix + "-" + strings.ToLower(rand.Text()[:8]) }

func namespace(t *testing.T) string {
	t.Helper()
	ns := unique("e2e")
	if err := env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

func bucketClass(policy cosiapi.DeletionPolicy, params map[string]string) *cosiapi.BucketClass {
	return objects.BucketClass(unique("class"), localenv.DriverName, policy, objects.ClassParameters(params))
}

func accessClass(multi bool) *cosiapi.BucketAccessClass {
	c := objects.BucketAccessClass(unique("access-class"), localenv.DriverName, func(c *cosiapi.BucketAccessClass) {
		c.Spec.AuthenticationType = cosiapi.AuthenticationTypeKey
		c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessSingleBucket
	})
	if multi {
		objects.MultiBucket(c)
	}
	return c
}

func claim(ns, class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(ns, unique("claim"), class, objects.S3)
}

var readWrite, readOnly = objects.ReadWrite, objects.ReadOnly

// access asks for modes on each claim; the Secret of claim i is named <access>-<i>.
func access(ns, class string, modes cosiapi.BucketAccessModes, claims ...*cosiapi.BucketClaim) *cosiapi.BucketAccess {
	name := unique("access")
	a := objects.BucketAccess(ns, name, class)
	for i, c := range claims {
		objects.Grant(c.Name, fmt.Sprintf("%s-%d", name, i), modes)(a)
	}
	return a
}

// What users see.

func claimConditions(c *cosiapi.BucketClaim) []metav1.Condition   { return c.Status.Conditions }
func accessConditions(a *cosiapi.BucketAccess) []metav1.Condition { return a.Status.Conditions }

func provisioned(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		switch o := o.(type) {
		case *cosiapi.BucketClaim:
			testenv.Condition(
				t,
				waits,
				o,
				claimConditions,
				cosiapi.ConditionProvisioned,
				metav1.ConditionTrue,
				cosiapi.ReasonProvisioned,
			)
		case *cosiapi.BucketAccess:
			testenv.Condition(
				t,
				waits,
				o,
				accessConditions,
				cosiapi.ConditionProvisioned,
				metav1.ConditionTrue,
				cosiapi.ReasonProvisioned,
			)
		}
	}
}

// backendBucket is the bucket in the store that claim c is bound to.
func backendBucket(t *testing.T, c *cosiapi.BucketClaim) string {
	t.Helper()
	b := &cosiapi.Bucket{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: c.Status.BoundBucketName}, b); err != nil {
		t.Fatal(err)
	}
	return b.Status.BucketID
}

func storeHasBucket(ctx context.Context, bucket string) (bool, error) {
	_, err := admin.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(bucket)})
	var notFound *types.NotFound
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		return false, nil
	}
	return false, err
}

// secretClient is an S3 client built only from the Secret, as a workload's would be.
func secretClient(t *testing.T, ns, name string) (*awss3.Client, string, *corev1.Secret) {
	t.Helper()
	secret := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		t.Fatal(err)
	}
	c, bucket, err := localenv.S3Client(secret)
	if err != nil {
		t.Fatal(err)
	}
	return c, bucket, secret
}

func put(c *awss3.Client, bucket, key string) error {
	_, err := c.PutObject(
		context.Background(),
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data of " + key)},
	)
	return err
}

func get(c *awss3.Client, bucket, key string) (string, error) {
	out, err := c.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	return string(data), err
}

// A 403 whose body could not be read (the store closed the connection) is denied too.
func denied(err error) bool {
	var respErr interface{ HTTPStatusCode() int }
	if errors.As(err, &respErr) && respErr.HTTPStatusCode() == 403 {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AccessDenied" || apiErr.ErrorCode() == "InvalidAccessKeyId")
}

func expectAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want success", what, err)
	}
}

func expectDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !denied(err) {
		t.Errorf("%s: %v, want AccessDenied or InvalidAccessKeyId", what, err)
	}
}

func del(t *testing.T, o client.Object) {
	t.Helper()
	if err := env.Client.Delete(t.Context(), o); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// events waits until an event with reason exists about obj (events.k8s.io/v1, what kubectl
// describe shows) and returns its note.
func event(t *testing.T, obj client.Object, reason string) string {
	t.Helper()
	var note string
	testenv.Eventually(t, func() error {
		list := &eventsv1.EventList{}
		if err := env.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
			return err
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.UID == obj.GetUID() {
				if e.Reason == reason {
					note = e.Note
					return nil
				}
				seen = append(seen, e.Reason)
			}
		}
		return fmt.Errorf("no %s event about %s; events: %v", reason, obj.GetName(), seen)
	})
	return note
}

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
