// Package scheme registers the types COSI reads and writes.
package scheme

import (
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// New returns a scheme with the core Kubernetes types and the COSI types: what the controller,
// the sidecar and the tests read and write.
func New() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(cosiapi.AddToScheme(s))
	return s
}
