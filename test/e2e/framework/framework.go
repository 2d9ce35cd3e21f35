// Package framework holds what the end-to-end suites share: creating the objects a user writes,
// waiting for what a user sees, and checking what issued credentials can do in the store. Each
// suite (test/e2e for the v1alpha2 S3 driver, test/e2e/v1alpha1 for a v1alpha1 driver,
// test/e2e/azure for the Azure Blob driver) starts its own environment with testenv.RunSystem and
// wraps it with New.
package framework

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/drivers/s3"
)

// Framework is one running environment as the suites use it.
type Framework struct {
	// Env is the running system (API server, store, COSI as processes).
	Env *localenv.Env
	// Waits runs Eventually-style waits on Env's client.
	Waits *testenv.Env
	// Admin is an S3 client with the store's root credentials, to look at the store directly;
	// nil for an environment without the Versity store (the Azure driver's).
	Admin *awss3.Client

	driverName, namespacePrefix string
}

// New wraps a started environment whose classes name driverName; namespaces the suite creates
// start with namespacePrefix.
func New(e *localenv.Env, driverName, namespacePrefix string) *Framework {
	f := &Framework{
		Env:             e,
		Waits:           &testenv.Env{APIServer: e.APIServer},
		driverName:      driverName,
		namespacePrefix: namespacePrefix,
	}
	if e.Store != nil {
		f.Admin = s3.NewS3Client(e.Store.S3Endpoint, "us-east-1",
			credentials.NewStaticCredentialsProvider(e.Store.RootAccessKey, e.Store.RootSecretKey, ""), nil)
	}
	return f
}

// Unique is prefix with a random suffix, as a name.
func Unique(prefix string) string { return prefix + "-" + strings.ToLower(rand.Text()[:8]) }

// Namespace creates a namespace for one test.
func (f *Framework) Namespace(t *testing.T) string {
	t.Helper()
	ns := Unique(f.namespacePrefix)
	if err := f.Env.Client.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return ns
}

// Create creates objs as the admin.
func (f *Framework) Create(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := f.Env.Client.Create(t.Context(), o); err != nil {
			t.Fatalf("creating %s: %v", o.GetName(), err)
		}
	}
}

// Delete deletes o; it may already be gone.
func (f *Framework) Delete(t *testing.T, o client.Object) {
	t.Helper()
	if err := client.IgnoreNotFound(f.Env.Client.Delete(t.Context(), o)); err != nil {
		t.Fatal(err)
	}
}

// BucketClass is a class of the suite's driver.
func (f *Framework) BucketClass(policy cosiapi.DeletionPolicy, params map[string]string) *cosiapi.BucketClass {
	return objects.BucketClass(Unique("class"), f.driverName, policy, objects.ClassParameters(params))
}

// AccessClass is a Key access class of the suite's driver, single- or multi-bucket.
func (f *Framework) AccessClass(multi bool) *cosiapi.BucketAccessClass {
	c := objects.BucketAccessClass(Unique("access-class"), f.driverName, func(c *cosiapi.BucketAccessClass) {
		c.Spec.AuthenticationType = cosiapi.AuthenticationTypeKey
		c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessSingleBucket
	})
	if multi {
		objects.MultiBucket(c)
	}
	return c
}

// Claim is an S3 claim of class in ns.
func Claim(ns, class string) *cosiapi.BucketClaim {
	return objects.BucketClaim(ns, Unique("claim"), class, objects.S3)
}

// Access asks for modes on each claim; the Secret of claim i is named <access>-<i>.
func Access(ns, class string, modes cosiapi.BucketAccessModes, claims ...*cosiapi.BucketClaim) *cosiapi.BucketAccess {
	name := Unique("access")
	a := objects.BucketAccess(ns, name, class)
	for i, c := range claims {
		objects.Grant(c.Name, fmt.Sprintf("%s-%d", name, i), modes)(a)
	}
	return a
}

// ClaimConditions reads a claim's conditions for testenv.Condition.
func ClaimConditions(c *cosiapi.BucketClaim) []metav1.Condition { return c.Status.Conditions }

// AccessConditions reads an access's conditions for testenv.Condition.
func AccessConditions(a *cosiapi.BucketAccess) []metav1.Condition { return a.Status.Conditions }

// Provisioned waits until each claim and access is Provisioned.
func (f *Framework) Provisioned(t *testing.T, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		switch o := o.(type) {
		case *cosiapi.BucketClaim:
			testenv.Condition(t, f.Waits, o, ClaimConditions,
				cosiapi.ConditionProvisioned, metav1.ConditionTrue, cosiapi.ReasonProvisioned)
		case *cosiapi.BucketAccess:
			testenv.Condition(t, f.Waits, o, AccessConditions,
				cosiapi.ConditionProvisioned, metav1.ConditionTrue, cosiapi.ReasonProvisioned)
		}
	}
}

// BackendBucket is the bucket in the store that claim c is bound to.
func (f *Framework) BackendBucket(t *testing.T, c *cosiapi.BucketClaim) string {
	t.Helper()
	b := &cosiapi.Bucket{}
	if err := f.Env.Client.Get(t.Context(), client.ObjectKey{Name: c.Status.BoundBucketName}, b); err != nil {
		t.Fatal(err)
	}
	return b.Status.BucketID
}

// StoreHasBucket asks the store, as its admin, whether bucket exists.
func (f *Framework) StoreHasBucket(ctx context.Context, bucket string) (bool, error) {
	_, err := f.Admin.HeadBucket(ctx, &awss3.HeadBucketInput{Bucket: aws.String(bucket)})
	var notFound *types.NotFound
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &notFound):
		return false, nil
	}
	return false, err
}

// SecretClient is an S3 client built only from the Secret, as a workload's would be.
func (f *Framework) SecretClient(t *testing.T, ns, name string) (*awss3.Client, string, *corev1.Secret) {
	t.Helper()
	secret := &corev1.Secret{}
	if err := f.Env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, secret); err != nil {
		t.Fatal(err)
	}
	c, bucket, err := localenv.S3Client(secret)
	if err != nil {
		t.Fatal(err)
	}
	return c, bucket, secret
}

// Event waits until an event with reason exists about obj (events.k8s.io/v1, what kubectl
// describe shows) and returns its note.
func (f *Framework) Event(t *testing.T, obj client.Object, reason string) string {
	t.Helper()
	var note string
	testenv.Eventually(t, func() error {
		list := &eventsv1.EventList{}
		if err := f.Env.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
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

// Put writes an object whose content names its key.
func Put(c *awss3.Client, bucket, key string) error {
	_, err := c.PutObject(context.Background(),
		&awss3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader("data of " + key)})
	return err
}

// Get reads an object.
func Get(c *awss3.Client, bucket, key string) (string, error) {
	out, err := c.GetObject(context.Background(), &awss3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return "", err
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	return string(data), err
}

// Denied says whether the store refused a request for its credentials. A 403 whose body could not
// be read (the store closed the connection) is denied too.
func Denied(err error) bool {
	var respErr interface{ HTTPStatusCode() int }
	if errors.As(err, &respErr) && respErr.HTTPStatusCode() == 403 {
		return true
	}
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode() == "AccessDenied" || apiErr.ErrorCode() == "InvalidAccessKeyId")
}

// ExpectAllowed fails t unless err is nil.
func ExpectAllowed(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v, want success", what, err)
	}
}

// ExpectDenied fails t unless the store refused the request.
func ExpectDenied(t *testing.T, what string, err error) {
	t.Helper()
	if !Denied(err) {
		t.Errorf("%s: %v, want AccessDenied or InvalidAccessKeyId", what, err)
	}
}

// DriverCall is one body of a driver call that a COSI process logged at -v 5: the "request" or
// "response" line of a call, the JSON of its message (secrets stripped) parsed.
type DriverCall struct {
	// Method is the call's method (DriverGrantBucketAccess).
	Method string
	// Body is the request or response.
	Body map[string]any
}

// LoggedCalls parses the JSON log of c and returns the bodies its "request" or "response" lines
// (what) carry for method. A line that is not JSON, or whose body is not a JSON object, fails t:
// the bodies must be readable, not {} or a string.
func (f *Framework) LoggedCalls(t *testing.T, c *localenv.Component, what, method string) []DriverCall {
	t.Helper()
	data, err := os.ReadFile(c.Log)
	if err != nil {
		t.Fatal(err)
	}
	var out []DriverCall
	for line := range strings.Lines(string(data)) {
		var l map[string]any
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			continue // not the process's JSON log (a panic's trace, the Go runtime)
		}
		if l["msg"] != what || l["method"] != method {
			continue
		}
		body, ok := l[what].(map[string]any)
		if !ok || len(body) == 0 {
			t.Fatalf("the %s of a %s in the log of %s is %v, not the message: %s", what, method, c.Name, l[what], line)
		}
		out = append(out, DriverCall{Method: method, Body: body})
	}
	return out
}

// Logged reports whether c logged a request or response (what) of method whose body matches.
func (f *Framework) Logged(
	t *testing.T, c *localenv.Component, what, method string, match func(body any) bool,
) bool {
	t.Helper()
	for _, call := range f.LoggedCalls(t, c, what, method) {
		if match(call.Body) {
			return true
		}
	}
	return false
}

// NotInLogs fails t for each of the processes whose log holds one of the values (secrets).
func NotInLogs(t *testing.T, processes []*localenv.Component, values ...string) {
	t.Helper()
	for _, c := range processes {
		data, err := os.ReadFile(c.Log)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range values {
			if v != "" && strings.Contains(string(data), v) {
				t.Errorf("the log of %s holds a secret value", c.Name)
			}
		}
	}
}

// Field is the value at path in a logged body (nil when absent); an int indexes a list.
func Field(body any, path ...any) any {
	for _, p := range path {
		switch p := p.(type) {
		case string:
			m, _ := body.(map[string]any)
			body = m[p]
		case int:
			l, _ := body.([]any)
			if p >= len(l) {
				return nil
			}
			body = l[p]
		}
	}
	return body
}
