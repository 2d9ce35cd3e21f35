package v1alpha1_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// Review of issue 41 (adversarial): breaks of the v1alpha1 adapter.

// An invalid endpoint value never reaches a message: CheckS3Endpoint's own comment says "the value
// is not repeated: it may hold a password", and the class parameter's refusal is a condition the
// tenant reads (and the flag's, a log line). Values that carry a credential without the "//" of
// an authority (user:password@host, the most common typo: a scheme left out), or in a query or
// fragment, are repeated in full.
func TestInvalidEndpointNeverRepeatsTheValue(t *testing.T) {
	f := newFake()
	c, _ := serveFake(t, f)
	for _, value := range []string{
		"admin:hunter2@s3.example.com",                         // scheme left out: parsed as scheme "admin"
		"https://s3.example.com/?X-Amz-Security-Token=hunter2", // a query
		"https://s3.example.com/#hunter2",                      // a fragment
	} {
		t.Run(value, func(t *testing.T) {
			if err := v1alpha1.CheckS3Endpoint(value); err == nil {
				t.Fatalf("CheckS3Endpoint(%q) accepted it", value)
			} else if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("CheckS3Endpoint repeats the credential: %v", err)
			}
			if err := (v1alpha1.Options{S3Endpoint: value}).Validate(); err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the flag's refusal (logged at start-up) repeats the credential: %v", err)
			}
			_, err := c.DriverGrantBucketAccess(t.Context(), withParams(map[string]string{v1alpha1.ParameterS3Endpoint: value}))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("grant with %s=%q: %v, want INVALID_ARGUMENT", v1alpha1.ParameterS3Endpoint, value, err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("the refusal, which goes into the tenant's BucketAccess condition, repeats the credential: %v", err)
			}
		})
	}
}

// A driver that names its accounts itself, the same ID for the same name ("cosi-" + the name, as
// drivers that prefix the IAM user do), and that will not return a key twice (ALREADY_EXISTS on a
// repeated grant: dev/v1alpha1drivers.KeyShownOnce's class). The first grant's answer was recorded
// (its ID is Known) but lost before any Secret was written (a refused Secret write, then a
// restart). docs/v1alpha1-drivers.md: with WithNoCredentialsHeld, "on ALREADY_EXISTS, revoke and
// grant once more, so the Secret gets a working key". The adapter revokes the *name* (ba-1), which
// names no account of this driver (NOT_FOUND, taken as success), instead of the recorded ID, so
// the second grant gets ALREADY_EXISTS again and the access stops, final.
func TestRegrantAlreadyExistsRevokesTheDriversAccount(t *testing.T) {
	f := newFake()
	f.grant = func(_ int, req *v1.DriverGrantBucketAccessRequest) (*v1.DriverGrantBucketAccessResponse, error) {
		id := "cosi-" + req.GetName()
		if f.accounts[id] {
			return nil, status.Errorf(codes.AlreadyExists, "user %s exists", id)
		}
		f.accounts[id] = true
		return &v1.DriverGrantBucketAccessResponse{AccountId: id, Credentials: s3Credentials()}, nil
	}
	c, _ := serveFake(t, f)
	rec := &recorder{}
	unheld := v1alpha1.WithNoCredentialsHeld(t.Context())
	if _, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(unheld, rec.accounts()),
		grantRequest("ba-1", readWrite)); err != nil {
		t.Fatal(err)
	}
	// The answer is lost before the Secret was written; the restarted sidecar grants again, with
	// the record (Known: cosi-ba-1) and the word that nobody holds the key.
	resp, err := c.DriverGrantBucketAccess(v1alpha1.WithDriverAccounts(unheld, rec.accounts()),
		grantRequest("ba-1", readWrite))
	if err != nil {
		_, _, calls := f.state()
		t.Fatalf("grant again after a lost answer, nobody holding the key: %v (driver calls %v); want the "+
			"recorded account revoked and granted once more", err, calls)
	}
	if resp.GetCredentials().GetS3().GetAccessSecretKey() != fakeSecret {
		t.Errorf("the answer lacks the key")
	}
}
