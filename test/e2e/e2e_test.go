// Package e2e tests the whole of COSI as users see it: the real cosi-controller, cosi-sidecar
// and cosi-driver-s3 binaries as processes, a real kube-apiserver and etcd, and the Versity S3
// gateway enforcing the issued credentials (dev/localenv, the same environment as make
// run). Each test follows one control flow of KEP-1979 and asserts what a user can observe:
// conditions and events, the Secret's keys, and what the issued credentials can do in the store.
package e2e

import (
	"context"
	"fmt"
	"testing"

	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/issuer"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

var (
	// front publishes the API server's ServiceAccount issuer; noIssuer says why there is none.
	front    *issuer.Front
	noIssuer error

	fw    *framework.Framework
	env   *localenv.Env
	waits *testenv.Env // Eventually-style waits on env's client
	admin *awss3.Client
)

func TestMain(m *testing.M) {
	opts := localenv.Options{
		// 5: the driver calls' requests and responses are logged too (TestDriverCallsLogged).
		Verbosity: 5, SidecarArgs: []string{"--rotation-grace-period=" + rotationGracePeriod.String()},
	}
	// The issuer the store's IAM service verifies ServiceAccount tokens against; without one, the
	// ServiceAccount tests skip, saying why.
	front, noIssuer = issuer.New()
	if noIssuer == nil {
		opts.Issuer = front
	}
	testenv.RunSystem(m, opts, func(_ context.Context, e *localenv.Env) error {
		fw = framework.New(e, localenv.DriverName, "e2e")
		env, waits, admin = fw.Env, fw.Waits, fw.Admin
		return nil
	})
}

// The suite's names for the framework (test/e2e/framework), shared with test/e2e/v1alpha1.

var (
	unique           = framework.Unique
	claim            = framework.Claim
	access           = framework.Access
	claimConditions  = framework.ClaimConditions
	accessConditions = framework.AccessConditions
	put, get         = framework.Put, framework.Get
	denied           = framework.Denied
	expectAllowed    = framework.ExpectAllowed
	expectDenied     = framework.ExpectDenied

	readWrite, readOnly = objects.ReadWrite, objects.ReadOnly
)

func namespace(t *testing.T) string                             { return fw.Namespace(t) }
func create(t *testing.T, objs ...client.Object)                { t.Helper(); fw.Create(t, objs...) }
func del(t *testing.T, o client.Object)                         { t.Helper(); fw.Delete(t, o) }
func provisioned(t *testing.T, objs ...client.Object)           { t.Helper(); fw.Provisioned(t, objs...) }
func backendBucket(t *testing.T, c *cosiapi.BucketClaim) string { return fw.BackendBucket(t, c) }
func event(t *testing.T, obj client.Object, reason string) string {
	t.Helper()
	return fw.Event(t, obj, reason)
}

func storeHasBucket(ctx context.Context, bucket string) (bool, error) {
	return fw.StoreHasBucket(ctx, bucket)
}

func secretClient(t *testing.T, ns, name string) (*awss3.Client, string, *corev1.Secret) {
	t.Helper()
	return fw.SecretClient(t, ns, name)
}

func bucketClass(policy cosiapi.DeletionPolicy, params map[string]string) *cosiapi.BucketClass {
	return fw.BucketClass(policy, params)
}

func accessClass(multi bool) *cosiapi.BucketAccessClass { return fw.AccessClass(multi) }

func errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
