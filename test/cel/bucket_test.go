package cel

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// newBucket returns a valid dynamically provisioned Bucket.
func newBucket(name string) *cosiapi.Bucket {
	return &cosiapi.Bucket{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketSpec{
			DriverName:     "s3.example.com",
			DeletionPolicy: cosiapi.DeletionPolicyDelete,
			Protocols:      []cosiapi.Protocol{cosiapi.ProtocolS3},
			Parameters:     map[string]string{"region": "us-east-1"},
			BucketClaimRef: cosiapi.BucketClaimReference{
				Name:      "claim",
				Namespace: "apps",
				UID:       "3f2b9c1e-0000-4000-8000-000000000001",
			},
		},
	}
}

// static turns a Bucket into an admin-imported one: an existing bucket ID and a claim reference
// without UID.
func static(b *cosiapi.Bucket) {
	b.Spec.ExistingBucketID = "legacy-bucket"
	b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain
	b.Spec.BucketClaimRef.UID = ""
}

func TestBucketCreate(t *testing.T) {
	runCreateCases(t, newBucket, []createCase[*cosiapi.Bucket]{
		{name: "valid dynamic bucket"},
		{name: "valid static bucket", mutate: static},
		{
			name:       "static bucket with deletionPolicy Delete",
			mutate:     func(b *cosiapi.Bucket) { static(b); b.Spec.DeletionPolicy = cosiapi.DeletionPolicyDelete },
			wantErrors: []string{"spec.deletionPolicy", "deletionPolicy must be Retain when existingBucketID is set"},
		},
		{name: "valid without optional fields", mutate: func(b *cosiapi.Bucket) {
			b.Spec.Protocols, b.Spec.Parameters, b.Spec.BucketClaimRef.UID = nil, nil, ""
		}},
		{name: "valid with every protocol", mutate: func(b *cosiapi.Bucket) { b.Spec.Protocols = cosiapi.Protocols }},
		{
			name:       "driverName missing",
			removed:    [][]string{{"spec", "driverName"}},
			wantErrors: []string{"spec.driverName: Required value"},
		},
		{
			name:       "driverName empty",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.DriverName = "" },
			wantErrors: []string{"spec.driverName", "at least 1 chars long"},
		},
		{
			name:       "driverName not in domain-name notation",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.DriverName = "-s3.example.com" },
			wantErrors: []string{"spec.driverName", "should match"},
		},
		{
			name:       "driverName longer than 63 characters",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.DriverName = strings.Repeat("a", 64) },
			wantErrors: []string{"spec.driverName", "Too long"},
		},
		{
			name:       "deletionPolicy missing",
			removed:    [][]string{{"spec", "deletionPolicy"}},
			wantErrors: []string{"spec.deletionPolicy: Required value"},
		},
		{
			name:       "deletionPolicy not Retain or Delete",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.DeletionPolicy = "Destroy" },
			wantErrors: []string{"spec.deletionPolicy: Unsupported value: \"Destroy\"", `"Retain", "Delete"`},
		},
		{
			name:       "unknown protocol",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.Protocols = []cosiapi.Protocol{"NFS"} },
			wantErrors: []string{"spec.protocols[0]: Unsupported value: \"NFS\""},
		},
		{
			name: "duplicate protocol",
			mutate: func(b *cosiapi.Bucket) {
				b.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3, cosiapi.ProtocolS3}
			},
			wantErrors: []string{"spec.protocols[1]: Duplicate value"},
		},
		{
			name:       "bucketClaimRef missing",
			removed:    [][]string{{"spec", "bucketClaimRef"}},
			wantErrors: []string{"spec.bucketClaimRef: Required value"},
		},
		{
			name:       "bucketClaimRef without name",
			removed:    [][]string{{"spec", "bucketClaimRef", "name"}},
			wantErrors: []string{"spec.bucketClaimRef.name: Required value"},
		},
		{
			name:       "bucketClaimRef without namespace",
			removed:    [][]string{{"spec", "bucketClaimRef", "namespace"}},
			wantErrors: []string{"spec.bucketClaimRef.namespace: Required value"},
		},
		{
			name:       "bucketClaimRef name not a DNS subdomain",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.Name = "My_Claim" },
			wantErrors: []string{"spec.bucketClaimRef.name", "should match"},
		},
		{
			name:       "bucketClaimRef namespace not a DNS label",
			mutate:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.Namespace = "apps.prod" },
			wantErrors: []string{"spec.bucketClaimRef.namespace", "should match"},
		},
	})
}

func TestBucketUpdate(t *testing.T) {
	runUpdateCases(t, newBucket, []updateCase[*cosiapi.Bucket]{
		{
			name:   "deletionPolicy can change",
			update: func(b *cosiapi.Bucket) { b.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain },
		},
		{
			name:       "driverName is immutable",
			update:     func(b *cosiapi.Bucket) { b.Spec.DriverName = "other.example.com" },
			wantErrors: []string{"spec.driverName", "driverName is immutable"},
		},
		{
			name:       "parameters are immutable",
			update:     func(b *cosiapi.Bucket) { b.Spec.Parameters["region"] = "eu-west-1" },
			wantErrors: []string{"spec.parameters", "parameters is immutable"},
		},
		{
			name:       "parameters cannot be added",
			before:     func(b *cosiapi.Bucket) { b.Spec.Parameters = nil },
			update:     func(b *cosiapi.Bucket) { b.Spec.Parameters = map[string]string{"versioning": "true"} },
			wantErrors: []string{"spec.parameters", "parameters is immutable"},
		},
		{
			name:       "parameters cannot be removed",
			update:     func(b *cosiapi.Bucket) { b.Spec.Parameters = nil },
			wantErrors: []string{"spec.parameters", "parameters is immutable"},
		},
		{
			name:       "protocols are immutable",
			update:     func(b *cosiapi.Bucket) { b.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolGCS} },
			wantErrors: []string{"spec.protocols", "protocols is immutable"},
		},
		{
			name: "protocols compare as a set",
			before: func(b *cosiapi.Bucket) {
				b.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3, cosiapi.ProtocolAzure}
			},
			update: func(b *cosiapi.Bucket) {
				b.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolAzure, cosiapi.ProtocolS3}
			},
		},
		{
			name:       "a static bucket cannot be changed to deletionPolicy Delete",
			before:     static,
			update:     func(b *cosiapi.Bucket) { b.Spec.DeletionPolicy = cosiapi.DeletionPolicyDelete },
			wantErrors: []string{"spec.deletionPolicy", "deletionPolicy must be Retain when existingBucketID is set"},
		},
		{
			name:   "a static bucket cannot become Delete by dropping existingBucketID",
			before: static,
			update: func(b *cosiapi.Bucket) {
				b.Spec.ExistingBucketID, b.Spec.DeletionPolicy = "", cosiapi.DeletionPolicyDelete
			},
			wantErrors: []string{"spec.existingBucketID", "existingBucketID is immutable"},
		},
		{
			name:       "existingBucketID cannot be added",
			update:     func(b *cosiapi.Bucket) { b.Spec.ExistingBucketID = "other-bucket" },
			wantErrors: []string{"spec.existingBucketID", "existingBucketID is immutable"},
		},
		{
			name:       "existingBucketID is immutable",
			before:     static,
			update:     func(b *cosiapi.Bucket) { b.Spec.ExistingBucketID = "other-bucket" },
			wantErrors: []string{"spec.existingBucketID", "existingBucketID is immutable"},
		},
		{
			name:   "bucketClaimRef.uid can be set once when a static bucket binds",
			before: static,
			update: func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.UID = "3f2b9c1e-0000-4000-8000-000000000002" },
		},
		{
			name:       "bucketClaimRef.uid cannot change once set",
			update:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.UID = "3f2b9c1e-0000-4000-8000-000000000009" },
			wantErrors: []string{"spec.bucketClaimRef.uid", "uid can be set once"},
		},
		{
			name:       "bucketClaimRef.uid cannot be removed once set",
			update:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.UID = "" },
			wantErrors: []string{"spec.bucketClaimRef.uid", "uid can be set once"},
		},
		{
			name:       "bucketClaimRef.name is immutable",
			before:     static,
			update:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.Name = "other-claim" },
			wantErrors: []string{"spec.bucketClaimRef.name", "name is immutable"},
		},
		{
			name:       "bucketClaimRef.namespace is immutable",
			before:     static,
			update:     func(b *cosiapi.Bucket) { b.Spec.BucketClaimRef.Namespace = "other" },
			wantErrors: []string{"spec.bucketClaimRef.namespace", "namespace is immutable"},
		},
		{
			name:   "status.bucketID can be set",
			update: func(b *cosiapi.Bucket) { b.Status.BucketID = "bc-1234" },
			status: true,
		},
		{
			name:         "status.bucketID cannot change once set",
			statusBefore: func(b *cosiapi.Bucket) { b.Status.BucketID = "bc-1234" },
			update:       func(b *cosiapi.Bucket) { b.Status.BucketID = "bc-5678" },
			status:       true,
			wantErrors:   []string{"status.bucketID", "bucketID cannot be changed or removed once set"},
		},
		{
			name:         "status.bucketID cannot be removed once set",
			statusBefore: func(b *cosiapi.Bucket) { b.Status.BucketID = "bc-1234" },
			update:       func(b *cosiapi.Bucket) { b.Status = cosiapi.BucketStatus{} },
			status:       true,
			wantErrors:   []string{"status.bucketID", "bucketID cannot be changed or removed once set"},
		},
		{
			name:         "status other than bucketID can change",
			statusBefore: func(b *cosiapi.Bucket) { b.Status.BucketID = "bc-1234" },
			update: func(b *cosiapi.Bucket) {
				b.Status.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3}
				b.Status.BucketInfo = map[string]string{cosiapi.SecretKeyS3EndpointURL: "https://s3.example.com"}
				b.Status.Conditions = []metav1.Condition{{
					Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned,
					LastTransitionTime: metav1.Now(),
				}}
			},
			status: true,
		},
		{
			name:       "status protocol must be known",
			update:     func(b *cosiapi.Bucket) { b.Status.Protocols = []cosiapi.Protocol{"FTP"} },
			status:     true,
			wantErrors: []string{"status.protocols[0]: Unsupported value"},
		},
	})
}
