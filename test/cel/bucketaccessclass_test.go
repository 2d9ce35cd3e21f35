package cel

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// newBucketAccessClass returns a valid BucketAccessClass.
func newBucketAccessClass(name string) *cosiapi.BucketAccessClass {
	return &cosiapi.BucketAccessClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketAccessClassSpec{
			DriverName:         "s3.example.com",
			AuthenticationType: cosiapi.AuthenticationTypeKey,
			Parameters:         map[string]string{"policy": "strict"},
		},
	}
}

func TestBucketAccessClassCreate(t *testing.T) {
	runCreateCases(t, newBucketAccessClass, []createCase[*cosiapi.BucketAccessClass]{
		{name: "valid class"},
		{name: "valid read-only multi-bucket class", mutate: func(c *cosiapi.BucketAccessClass) {
			c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
			c.Spec.DisallowedBucketAccessModes = cosiapi.DisallowedBucketAccessModes{
				ObjectData:     []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite, cosiapi.BucketAccessModeWriteOnly},
				ObjectMetadata: []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite, cosiapi.BucketAccessModeWriteOnly},
				BucketMetadata: []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite, cosiapi.BucketAccessModeWriteOnly},
			}
		}},
		{name: "valid ServiceAccount class", mutate: func(c *cosiapi.BucketAccessClass) {
			c.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
		}},
		{
			name:       "driverName missing",
			removed:    [][]string{{"spec", "driverName"}},
			wantErrors: []string{"spec.driverName: Required value"},
		},
		{
			name:       "authenticationType uses the v1alpha1 spelling",
			mutate:     func(c *cosiapi.BucketAccessClass) { c.Spec.AuthenticationType = "KEY" },
			wantErrors: []string{"spec.authenticationType: Unsupported value: \"KEY\"", `"Key", "ServiceAccount"`},
		},
		{
			name:       "authenticationType IAM was renamed ServiceAccount",
			mutate:     func(c *cosiapi.BucketAccessClass) { c.Spec.AuthenticationType = "IAM" },
			wantErrors: []string{"spec.authenticationType: Unsupported value: \"IAM\""},
		},
		{
			name:       "unknown multiBucketAccess",
			mutate:     func(c *cosiapi.BucketAccessClass) { c.Spec.MultiBucketAccess = "Many" },
			wantErrors: []string{"spec.multiBucketAccess: Unsupported value: \"Many\"", `"SingleBucket", "MultipleBuckets"`},
		},
		{
			name: "unknown disallowed access mode",
			mutate: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.ObjectMetadata = []cosiapi.BucketAccessMode{"Delete"}
			},
			wantErrors: []string{"spec.disallowedBucketAccessModes.objectMetadata[0]: Unsupported value: \"Delete\""},
		},
		{
			name: "duplicate disallowed access mode",
			mutate: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.BucketMetadata = []cosiapi.BucketAccessMode{
					cosiapi.BucketAccessModeReadWrite,
					cosiapi.BucketAccessModeReadWrite,
				}
			},
			wantErrors: []string{"spec.disallowedBucketAccessModes.bucketMetadata[1]: Duplicate value"},
		},
	})
}

// TestBucketAccessClassDefaultsToKey checks that the API server fills in the documented default.
func TestBucketAccessClassDefaultsToKey(t *testing.T) {
	c := newBucketAccessClass(uniqueName("default"))
	c.Spec.AuthenticationType = ""
	if err := env.Client.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	var got cosiapi.BucketAccessClass
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.AuthenticationType != cosiapi.AuthenticationTypeKey {
		t.Errorf("authenticationType = %q, want the default %q", got.Spec.AuthenticationType, cosiapi.AuthenticationTypeKey)
	}
	if got.Spec.MultiBucketAccess != "" {
		t.Errorf("multiBucketAccess = %q, want it left empty (no opinion) for COSI to decide", got.Spec.MultiBucketAccess)
	}
}

func TestBucketAccessClassUpdate(t *testing.T) {
	runUpdateCases(t, newBucketAccessClass, []updateCase[*cosiapi.BucketAccessClass]{
		{
			name:   "metadata can change",
			update: func(c *cosiapi.BucketAccessClass) { c.Labels = map[string]string{"tier": "gold"} },
		},
		{
			name: "authenticationType is immutable",
			update: func(c *cosiapi.BucketAccessClass) {
				c.Spec.AuthenticationType = cosiapi.AuthenticationTypeServiceAccount
			},
			wantErrors: []string{"spec", "spec is immutable; create a new BucketAccessClass instead"},
		},
		{
			name: "disallowed modes are immutable",
			update: func(c *cosiapi.BucketAccessClass) {
				c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeWriteOnly}
			},
			wantErrors: []string{"spec", "spec is immutable"},
		},
		{
			name: "multiBucketAccess is immutable",
			update: func(c *cosiapi.BucketAccessClass) {
				c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
			},
			wantErrors: []string{"spec", "spec is immutable"},
		},
	})
}
