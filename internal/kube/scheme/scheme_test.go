package scheme_test

import (
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/scheme"
)

// TestNew: the scheme knows what the controller, the sidecar and the tests read and write.
func TestNew(t *testing.T) {
	s := scheme.New()
	for _, obj := range []runtime.Object{
		&cosiapi.BucketClaim{}, &cosiapi.Bucket{}, &cosiapi.BucketAccess{},
		&cosiapi.BucketClass{}, &cosiapi.BucketAccessClass{},
		&corev1.Secret{}, &corev1.Namespace{}, &coordinationv1.Lease{},
	} {
		if _, _, err := s.ObjectKinds(obj); err != nil {
			t.Errorf("%T: %v", obj, err)
		}
	}
}
