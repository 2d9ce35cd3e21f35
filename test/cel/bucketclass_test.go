package cel

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// newBucketClass returns a valid BucketClass.
func newBucketClass(name string) *cosiapi.BucketClass {
	return &cosiapi.BucketClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketClassSpec{
			DriverName:     "s3.example.com",
			DeletionPolicy: cosiapi.DeletionPolicyDelete,
			Parameters:     map[string]string{"versioning": "true"},
		},
	}
}

func TestBucketClassCreate(t *testing.T) {
	runCreateCases(t, newBucketClass, []createCase[*cosiapi.BucketClass]{
		{name: "valid class"},
		{name: "valid Retain class without parameters", mutate: func(c *cosiapi.BucketClass) {
			c.Spec.DeletionPolicy, c.Spec.Parameters = cosiapi.DeletionPolicyRetain, nil
		}},
		{
			name:       "driverName missing",
			removed:    [][]string{{"spec", "driverName"}},
			wantErrors: []string{"spec.driverName: Required value"},
		},
		{
			name:       "driverName with a space",
			mutate:     func(c *cosiapi.BucketClass) { c.Spec.DriverName = "s3 example" },
			wantErrors: []string{"spec.driverName", "should match"},
		},
		{
			name:       "deletionPolicy missing: there is no default",
			removed:    [][]string{{"spec", "deletionPolicy"}},
			wantErrors: []string{"spec.deletionPolicy: Required value"},
		},
		{
			name:       "deletionPolicy lower case",
			mutate:     func(c *cosiapi.BucketClass) { c.Spec.DeletionPolicy = "delete" },
			wantErrors: []string{"spec.deletionPolicy: Unsupported value: \"delete\""},
		},
	})
}

func TestBucketClassUpdate(t *testing.T) {
	runUpdateCases(t, newBucketClass, []updateCase[*cosiapi.BucketClass]{
		{
			name:   "metadata can change",
			update: func(c *cosiapi.BucketClass) { c.Annotations = map[string]string{"note": "default"} },
		},
		{
			name:       "parameters are immutable",
			update:     func(c *cosiapi.BucketClass) { c.Spec.Parameters["versioning"] = "false" },
			wantErrors: []string{"spec", "spec is immutable; create a new BucketClass instead"},
		},
		{
			name:       "deletionPolicy is immutable",
			update:     func(c *cosiapi.BucketClass) { c.Spec.DeletionPolicy = cosiapi.DeletionPolicyRetain },
			wantErrors: []string{"spec", "spec is immutable"},
		},
		{
			name:       "driverName is immutable",
			update:     func(c *cosiapi.BucketClass) { c.Spec.DriverName = "gcs.example.com" },
			wantErrors: []string{"spec", "spec is immutable"},
		},
	})
}
