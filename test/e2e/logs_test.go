package e2e

import (
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

// At -v 5 (the suite runs every COSI process so) the sidecar logs each driver call's request and
// response, secrets stripped, as JSON a reader can parse: the grant's request names the access's
// account and bucket, its response the key ID the Secret holds and the stripped marker where the
// secret key was; the secret key is in no COSI process's log.
func TestDriverCallsLogged(t *testing.T) {
	ns := namespace(t)
	bc := fw.BucketClass(cosiapi.DeletionPolicyDelete, nil)
	bac := fw.AccessClass(false)
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, readWrite, c)
	create(t, a)
	provisioned(t, a)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	_, _, secret := fw.SecretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	keyID := string(secret.Data[cosiapi.SecretKeyS3AccessKeyID])
	key := string(secret.Data[cosiapi.SecretKeyS3SecretAccessKey])
	bucket := backendBucket(t, c)

	testenv.Eventually(t, func() error {
		if !logged(t, "request", func(b any) bool {
			return framework.Field(b, "accountId") == a.Status.AccountID &&
				framework.Field(b, "buckets", 0, "bucketId") == bucket
		}) {
			return fmt.Errorf("no DriverGrantBucketAccess request for account %s and bucket %s in the sidecar's log",
				a.Status.AccountID, bucket)
		}
		if !logged(t, "response", func(b any) bool {
			return framework.Field(b, "credentials", "s3", "accessKeyId") == keyID &&
				framework.Field(b, "credentials", "s3", "accessSecretKey") == driver.StrippedValue
		}) {
			return fmt.Errorf("no DriverGrantBucketAccess response with key ID %s and the secret stripped "+
				"in the sidecar's log", keyID)
		}
		return nil
	})
	framework.NotInLogs(t, []*localenv.Component{env.Sidecar, env.Driver, env.Controller}, key)
	del(t, a)
	waits.Gone(t, a)
	del(t, c)
	waits.Gone(t, c)
}

// logged reports whether the sidecar logged a DriverGrantBucketAccess request or response (what)
// whose body matches.
func logged(t *testing.T, what string, match func(body any) bool) bool {
	t.Helper()
	return fw.Logged(t, env.Sidecar, what, "DriverGrantBucketAccess", match)
}
