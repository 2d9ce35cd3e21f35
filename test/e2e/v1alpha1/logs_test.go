package v1alpha1

import (
	"fmt"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/localenv"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/test/e2e/framework"
)

// At -v 5 (the suite runs every COSI process so) the sidecar logs the adapter's v1alpha1 calls on
// the wire with their bodies, as JSON a reader can parse: the grant's request names the account
// and the bucket, its response the account, with the credentials' secrets removed (v1alpha1 marks
// no field secret: the sanitizer removes CredentialDetails.secrets by name). The secret key the
// Secret holds is in no COSI process's log.
func TestDriverCallsLogged(t *testing.T) {
	ns := namespace(t)
	bc := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	bac := accessClass()
	c := claim(ns, bc.Name)
	create(t, bc, bac, c)
	provisioned(t, c)
	a := access(ns, bac.Name, objects.ReadWrite, c)
	create(t, a)
	provisioned(t, a)
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), a); err != nil {
		t.Fatal(err)
	}
	_, _, secret := secretClient(t, ns, a.Spec.BucketClaims[0].AccessSecretName)
	bucket := backendBucket(t, c)

	testenv.Eventually(t, func() error {
		if !logged(t, "request", func(b any) bool {
			return framework.Field(b, "name") == a.Status.AccountID && framework.Field(b, "bucketId") == bucket
		}) {
			return fmt.Errorf("no v1alpha1 DriverGrantBucketAccess request for account %s and bucket %s in the "+
				"sidecar's log", a.Status.AccountID, bucket)
		}
		if !logged(t, "response", func(b any) bool {
			s3, ok := framework.Field(b, "credentials", "s3").(map[string]any)
			return framework.Field(b, "accountId") == a.Status.AccountID && ok && s3["secrets"] == nil
		}) {
			return fmt.Errorf("no v1alpha1 DriverGrantBucketAccess response for account %s with its secrets "+
				"removed in the sidecar's log", a.Status.AccountID)
		}
		return nil
	})
	framework.NotInLogs(t, []*localenv.Component{env.Sidecar, env.Driver, env.Controller},
		string(secret.Data[cosiapi.SecretKeyS3SecretAccessKey]))
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
