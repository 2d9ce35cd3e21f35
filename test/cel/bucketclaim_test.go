package cel

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// newBucketClaim returns a valid BucketClaim for a new bucket.
func newBucketClaim(name string) *cosiapi.BucketClaim {
	return &cosiapi.BucketClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNamespace},
		Spec: cosiapi.BucketClaimSpec{
			BucketClassName: "standard",
			Protocols:       []cosiapi.Protocol{cosiapi.ProtocolS3},
		},
	}
}

// staticClaim turns a BucketClaim into one for an imported Bucket.
func staticClaim(c *cosiapi.BucketClaim) {
	c.Spec.BucketClassName = ""
	c.Spec.ExistingBucketName = "legacy-bucket"
}

func TestBucketClaimCreate(t *testing.T) {
	runCreateCases(t, newBucketClaim, []createCase[*cosiapi.BucketClaim]{
		{name: "valid claim for a new bucket"},
		{name: "valid claim for an imported bucket", mutate: staticClaim},
		{name: "valid without protocols", mutate: func(c *cosiapi.BucketClaim) { c.Spec.Protocols = nil }},
		{
			name:       "neither bucketClassName nor existingBucketName",
			mutate:     func(c *cosiapi.BucketClaim) { c.Spec.BucketClassName = "" },
			wantErrors: []string{"spec", "exactly one of bucketClassName or existingBucketName must be set"},
		},
		{
			name:       "both bucketClassName and existingBucketName",
			mutate:     func(c *cosiapi.BucketClaim) { c.Spec.ExistingBucketName = "legacy-bucket" },
			wantErrors: []string{"spec", "exactly one of bucketClassName or existingBucketName must be set"},
		},
		{
			name:       "bucketClassName not a DNS subdomain",
			mutate:     func(c *cosiapi.BucketClaim) { c.Spec.BucketClassName = "Standard_Class" },
			wantErrors: []string{"spec.bucketClassName", "should match"},
		},
		{
			name:       "existingBucketName not a DNS subdomain",
			mutate:     func(c *cosiapi.BucketClaim) { staticClaim(c); c.Spec.ExistingBucketName = "Legacy Bucket" },
			wantErrors: []string{"spec.existingBucketName", "should match"},
		},
		{
			name:       "unknown protocol",
			mutate:     func(c *cosiapi.BucketClaim) { c.Spec.Protocols = []cosiapi.Protocol{"s3"} },
			wantErrors: []string{"spec.protocols[0]: Unsupported value: \"s3\""},
		},
		{
			name:       "more protocols than exist",
			mutate:     func(c *cosiapi.BucketClaim) { c.Spec.Protocols = append(cosiapi.Protocols, cosiapi.ProtocolS3) },
			wantErrors: []string{"spec.protocols", "Too many"},
		},
		{
			name:       "spec missing",
			removed:    [][]string{{"spec"}},
			wantErrors: []string{"spec: Required value"},
		},
	})
}

func TestBucketClaimUpdate(t *testing.T) {
	runUpdateCases(t, newBucketClaim, []updateCase[*cosiapi.BucketClaim]{
		{
			name:   "metadata can change",
			update: func(c *cosiapi.BucketClaim) { c.Labels = map[string]string{"team": "data"} },
		},
		{
			name:       "bucketClassName is immutable",
			update:     func(c *cosiapi.BucketClaim) { c.Spec.BucketClassName = "premium" },
			wantErrors: []string{"spec.bucketClassName", "bucketClassName is immutable"},
		},
		{
			name:       "protocols are immutable",
			update:     func(c *cosiapi.BucketClaim) { c.Spec.Protocols = append(c.Spec.Protocols, cosiapi.ProtocolAzure) },
			wantErrors: []string{"spec.protocols", "protocols is immutable"},
		},
		{
			name:       "existingBucketName is immutable",
			before:     staticClaim,
			update:     func(c *cosiapi.BucketClaim) { c.Spec.ExistingBucketName = "other-bucket" },
			wantErrors: []string{"spec.existingBucketName", "existingBucketName is immutable"},
		},
		{
			name:       "a claim cannot switch from a class to an imported bucket",
			update:     staticClaim,
			wantErrors: []string{"spec.bucketClassName", "spec.existingBucketName", "is immutable"},
		},
		{
			name:   "status.boundBucketName can be set",
			update: func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "bc-1234" },
			status: true,
		},
		{
			name:         "status.boundBucketName cannot change once set",
			statusBefore: func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "bc-1234" },
			update:       func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "bc-5678" },
			status:       true,
			wantErrors:   []string{"status.boundBucketName", "boundBucketName cannot be changed or removed once set"},
		},
		{
			name:         "status.boundBucketName cannot be removed once set",
			statusBefore: func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "bc-1234" },
			update:       func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "" },
			status:       true,
			wantErrors:   []string{"status.boundBucketName", "boundBucketName cannot be changed or removed once set"},
		},
		{
			name: "status.boundBucketName cannot be removed while the rest of status stays",
			statusBefore: func(c *cosiapi.BucketClaim) {
				c.Status.BoundBucketName = "bc-1234"
				c.Status.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3}
			},
			update:     func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "" },
			status:     true,
			wantErrors: []string{"status.boundBucketName", "boundBucketName cannot be changed or removed once set"},
		},
		{
			name: "status conditions must be well-formed",
			update: func(c *cosiapi.BucketClaim) {
				c.Status.Conditions = []metav1.Condition{{
					Type: cosiapi.ConditionProvisioned, Status: "Maybe", Reason: cosiapi.ReasonProvisioning,
					LastTransitionTime: metav1.Now(),
				}}
			},
			status:     true,
			wantErrors: []string{"status.conditions[0].status: Unsupported value: \"Maybe\""},
		},
	})
}
