package cel

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// newBucketAccess returns a valid single-bucket BucketAccess.
func newBucketAccess(name string) *cosiapi.BucketAccess {
	return &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: cosiapi.BucketAccessSpec{
			BucketClaims: []cosiapi.BucketClaimAccess{
				claimAccess("data", "data-creds", cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}),
			},
			BucketAccessClassName: "standard",
			Protocol:              cosiapi.ProtocolS3,
		},
	}
}

func claimAccess(claim, secret string, modes cosiapi.BucketAccessModes) cosiapi.BucketClaimAccess {
	return cosiapi.BucketClaimAccess{BucketClaimName: claim, AccessSecretName: secret, AccessModes: modes}
}

// multiBucket makes a BucketAccess reference two claims.
func multiBucket(a *cosiapi.BucketAccess) {
	a.Spec.BucketClaims = append(a.Spec.BucketClaims,
		claimAccess("logs", "logs-creds", cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeWriteOnly}))
}

// handedOff fills the status the controller writes when it hands the access to the sidecar.
func handedOff(a *cosiapi.BucketAccess) {
	a.Status.DriverName = "s3.example.com"
	a.Status.AuthenticationType = cosiapi.AuthenticationTypeKey
	a.Status.Parameters = map[string]string{"policy": "strict"}
	a.Status.AccessedBuckets = []cosiapi.AccessedBucket{
		{BucketClaimName: "data", BucketName: "bc-1234", BucketID: "bc-1234"},
	}
}

func TestBucketAccessCreate(t *testing.T) {
	runCreateCases(t, newBucketAccess, []createCase[*cosiapi.BucketAccess]{
		{name: "valid single-bucket access"},
		{name: "valid multi-bucket access", mutate: multiBucket},
		{name: "valid with every access mode category", mutate: func(a *cosiapi.BucketAccess) {
			a.Spec.BucketClaims[0].AccessModes = cosiapi.BucketAccessModes{
				ObjectData:     cosiapi.BucketAccessModeReadOnly,
				ObjectMetadata: cosiapi.BucketAccessModeReadWrite,
				BucketMetadata: cosiapi.BucketAccessModeWriteOnly,
			}
		}},
		{
			name:   "valid with a serviceAccountName",
			mutate: func(a *cosiapi.BucketAccess) { a.Spec.ServiceAccountName = "app-runner" },
		},
		{
			name:       "bucketClaims missing",
			removed:    [][]string{{"spec", "bucketClaims"}},
			wantErrors: []string{"spec.bucketClaims: Required value"},
		},
		{
			name:       "bucketClaims empty",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.BucketClaims = []cosiapi.BucketClaimAccess{} },
			wantErrors: []string{"spec.bucketClaims", "should have at least 1 items"},
		},
		{
			name: "the same claim twice",
			mutate: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims = append(a.Spec.BucketClaims,
					claimAccess("data", "other-creds", cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}))
			},
			wantErrors: []string{"spec.bucketClaims[1]: Duplicate value", "data"},
		},
		{
			name: "two claims sharing one Secret",
			mutate: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims = append(a.Spec.BucketClaims,
					claimAccess("logs", "data-creds", cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}))
			},
			wantErrors: []string{"spec.bucketClaims", "each bucket claim must use a different accessSecretName"},
		},
		{
			name: "more than 64 claims",
			mutate: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims = nil
				for i := range 65 {
					a.Spec.BucketClaims = append(a.Spec.BucketClaims, claimAccess(fmt.Sprintf("c%d", i), fmt.Sprintf("s%d", i),
						cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}))
				}
			},
			wantErrors: []string{"spec.bucketClaims", "Too many"},
		},
		{
			name:       "accessSecretName empty",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.BucketClaims[0].AccessSecretName = "" },
			wantErrors: []string{"spec.bucketClaims[0].accessSecretName", "at least 1 chars long"},
		},
		{
			name:       "accessSecretName not a valid Secret name",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.BucketClaims[0].AccessSecretName = "Data_Creds" },
			wantErrors: []string{"spec.bucketClaims[0].accessSecretName", "should match"},
		},
		{
			name:       "bucketClaimName empty",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.BucketClaims[0].BucketClaimName = "" },
			wantErrors: []string{"spec.bucketClaims[0].bucketClaimName", "at least 1 chars long"},
		},
		{
			name:   "no access mode requested",
			mutate: func(a *cosiapi.BucketAccess) { a.Spec.BucketClaims[0].AccessModes = cosiapi.BucketAccessModes{} },
			wantErrors: []string{
				"spec.bucketClaims[0].accessModes",
				"at least one of objectData, objectMetadata or bucketMetadata must be requested",
			},
		},
		{
			name: "unknown access mode",
			mutate: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims[0].AccessModes.BucketMetadata = "ReadMostly"
			},
			wantErrors: []string{"spec.bucketClaims[0].accessModes.bucketMetadata: Unsupported value: \"ReadMostly\""},
		},
		{
			name:       "bucketAccessClassName missing",
			removed:    [][]string{{"spec", "bucketAccessClassName"}},
			wantErrors: []string{"spec.bucketAccessClassName: Required value"},
		},
		{
			name:       "protocol missing",
			removed:    [][]string{{"spec", "protocol"}},
			wantErrors: []string{"spec.protocol: Required value"},
		},
		{
			name:       "unknown protocol",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.Protocol = "Swift" },
			wantErrors: []string{"spec.protocol: Unsupported value: \"Swift\""},
		},
		{
			name:       "serviceAccountName not a valid ServiceAccount name",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.ServiceAccountName = "App_Runner" },
			wantErrors: []string{"spec.serviceAccountName", "should match"},
		},
		{
			name:       "serviceAccountName longer than 253 characters",
			mutate:     func(a *cosiapi.BucketAccess) { a.Spec.ServiceAccountName = strings.Repeat("a", 254) },
			wantErrors: []string{"spec.serviceAccountName", "Too long"},
		},
	})
}

func TestBucketAccessUpdate(t *testing.T) {
	runUpdateCases(t, newBucketAccess, []updateCase[*cosiapi.BucketAccess]{
		{
			name:   "metadata can change",
			update: func(a *cosiapi.BucketAccess) { a.Annotations = map[string]string{"owner": "team-a"} },
		},
		{
			name:       "protocol is immutable",
			update:     func(a *cosiapi.BucketAccess) { a.Spec.Protocol = cosiapi.ProtocolAzure },
			wantErrors: []string{"spec.protocol", "protocol is immutable"},
		},
		{
			name: "access modes are immutable",
			update: func(a *cosiapi.BucketAccess) {
				a.Spec.BucketClaims[0].AccessModes.ObjectData = cosiapi.BucketAccessModeReadOnly
			},
			wantErrors: []string{"spec.bucketClaims", "bucketClaims is immutable"},
		},
		{
			name:       "claims cannot be added",
			update:     multiBucket,
			wantErrors: []string{"spec.bucketClaims", "bucketClaims is immutable"},
		},
		{
			name:       "bucketAccessClassName is immutable",
			update:     func(a *cosiapi.BucketAccess) { a.Spec.BucketAccessClassName = "premium" },
			wantErrors: []string{"spec.bucketAccessClassName", "bucketAccessClassName is immutable"},
		},
		{
			name:       "serviceAccountName cannot be added",
			update:     func(a *cosiapi.BucketAccess) { a.Spec.ServiceAccountName = "app-runner" },
			wantErrors: []string{"spec.serviceAccountName", "serviceAccountName is immutable"},
		},
		{
			name:   "the controller hands off",
			update: handedOff,
			status: true,
		},
		{
			name:         "status.accountID can be set after the hand-off",
			statusBefore: handedOff,
			update:       func(a *cosiapi.BucketAccess) { a.Status.AccountID = "ba-1234" },
			status:       true,
		},
		{
			name:         "status.accountID cannot change once set",
			statusBefore: func(a *cosiapi.BucketAccess) { handedOff(a); a.Status.AccountID = "ba-1234" },
			update:       func(a *cosiapi.BucketAccess) { a.Status.AccountID = "ba-5678" },
			status:       true,
			wantErrors:   []string{"status.accountID", "accountID cannot be changed or removed once set"},
		},
		{
			name:         "status.accountID cannot be removed once set",
			statusBefore: func(a *cosiapi.BucketAccess) { handedOff(a); a.Status.AccountID = "ba-1234" },
			update:       func(a *cosiapi.BucketAccess) { a.Status.AccountID = "" },
			status:       true,
			wantErrors:   []string{"status.accountID", "accountID cannot be changed or removed once set"},
		},
		{
			name:         "the whole status cannot be removed once set",
			statusBefore: func(a *cosiapi.BucketAccess) { handedOff(a); a.Status.AccountID = "ba-1234" },
			update:       func(a *cosiapi.BucketAccess) { a.Status = cosiapi.BucketAccessStatus{} },
			status:       true,
			wantErrors: []string{
				"status.accountID", "accountID cannot be changed or removed once set",
				"status.driverName", "driverName cannot be changed or removed once set",
			},
		},
		{
			name:         "status.driverName cannot change once set",
			statusBefore: handedOff,
			update:       func(a *cosiapi.BucketAccess) { a.Status.DriverName = "other.example.com" },
			status:       true,
			wantErrors:   []string{"status.driverName", "driverName cannot be changed or removed once set"},
		},
		{
			name:         "status.authenticationType cannot change once set",
			statusBefore: handedOff,
			update: func(a *cosiapi.BucketAccess) {
				a.Status.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
			},
			status:     true,
			wantErrors: []string{"status.authenticationType", "authenticationType cannot be changed or removed once set"},
		},
		{
			name:         "status.parameters cannot change after the hand-off",
			statusBefore: handedOff,
			update:       func(a *cosiapi.BucketAccess) { a.Status.Parameters = nil },
			status:       true,
			wantErrors:   []string{"status.parameters", "parameters cannot change once driverName is set"},
		},
		{
			name:         "conditions can change after the hand-off",
			statusBefore: handedOff,
			update: func(a *cosiapi.BucketAccess) {
				a.Status.Conditions = []metav1.Condition{{
					Type: cosiapi.ConditionProvisionFailed, Status: metav1.ConditionTrue, Reason: cosiapi.ReasonDriverError,
					Message: "Unavailable: backend down", LastTransitionTime: metav1.Now(),
				}}
			},
			status: true,
		},
		{
			name:         "status.accessedBuckets keyed by claim",
			statusBefore: handedOff,
			update: func(a *cosiapi.BucketAccess) {
				a.Status.AccessedBuckets = append(a.Status.AccessedBuckets, a.Status.AccessedBuckets[0])
			},
			status:     true,
			wantErrors: []string{"status.accessedBuckets[1]: Duplicate value"},
		},
		{
			name:       "status.authenticationType must be known",
			update:     func(a *cosiapi.BucketAccess) { a.Status.AuthenticationType = "IAM" },
			status:     true,
			wantErrors: []string{"status.authenticationType: Unsupported value: \"IAM\""},
		},
	})
}
