package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestSecrets: cosi-reserved-secrets. On a Secret COSI wrote, its finalizer and its
// bucketaccess-uid label are COSI's; no tenant Secret may take the label; the rest of a COSI Secret,
// and every other Secret, stays the tenant's.
func TestSecrets(t *testing.T) {
	waitForPolicies(t)
	labelled := func(s *corev1.Secret) {
		metav1.SetMetaDataLabel(&s.ObjectMeta, cosiapi.LabelBucketAccessUID, "3f2b9c1e-0000-4000-8000-000000000002")
	}
	runCreates(t, newSecret, []createCase[*corev1.Secret]{
		{name: "tenant creates a Secret", as: tenant},
		{
			name:   "tenant creates a Secret with a finalizer of the same name as COSI's",
			as:     tenant,
			mutate: protected[*corev1.Secret],
		},
		{name: "tenant creates a Secret that poses as COSI's", as: tenant, mutate: cosiSecret, refused: secretLabelReserved},
		{name: "tenant creates a Secret with COSI's label only", as: tenant, mutate: labelled, refused: secretLabelReserved},
		{name: "sidecar writes an access Secret", as: sidecar, mutate: accessSecret},
	})
	runUpdates(t, newSecret, []updateCase[*corev1.Secret]{
		{name: "tenant removes COSI's finalizer", before: cosiSecret, as: tenant, update: func(s *corev1.Secret) {
			controllerutil.RemoveFinalizer(s, cosiapi.FinalizerProtection)
		}, refused: secretFinalizerReserved},
		{
			name:     "tenant removes COSI's finalizer from a deleting Secret",
			before:   cosiSecret,
			deleting: true,
			as:       tenant,
			update: func(s *corev1.Secret) {
				s.Finalizers = nil
			},
			refused: secretFinalizerReserved,
		},
		{name: "tenant removes the label", before: cosiSecret, as: tenant, update: func(s *corev1.Secret) {
			delete(s.Labels, cosiapi.LabelBucketAccessUID)
		}, refused: secretLabelReserved},
		{
			name:    "tenant changes the label to another access",
			before:  cosiSecret,
			as:      tenant,
			update:  labelled,
			refused: secretLabelReserved,
		},
		{name: "tenant labels its own Secret as COSI's", as: tenant, update: labelled, refused: secretLabelReserved},

		{name: "tenant annotates a COSI Secret", before: cosiSecret, as: tenant, update: func(s *corev1.Secret) {
			metav1.SetMetaDataAnnotation(&s.ObjectMeta, "reflector.example.com/reflect", "true")
			metav1.SetMetaDataLabel(&s.ObjectMeta, "app", "gallery")
		}},
		{name: "tenant deletes a COSI Secret", before: cosiSecret, as: tenant},
		// COSI's annotations say what COSI wrote and when it checks again: kubectl cosi tells from
		// secret-check-interval when a deleted Secret comes back (and doctor when it is stuck),
		// the sidecar from credential-id which credential a Secret holds during a rotation.
		{
			name:   "tenant changes COSI's secret-check-interval annotation",
			before: cosiAnnotatedSecret,
			as:     tenant,
			update: func(s *corev1.Secret) {
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationSecretCheckInterval, "1000000h")
			},
			refused: secretAnnotationsReserved,
		},
		{
			name:   "tenant changes COSI's credential-id annotation",
			before: cosiAnnotatedSecret,
			as:     tenant,
			update: func(s *corev1.Secret) {
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationCredentialID, "another")
			},
			refused: secretAnnotationsReserved,
		},
		{
			name:    "tenant removes COSI's annotations",
			before:  cosiAnnotatedSecret,
			as:      tenant,
			update:  func(s *corev1.Secret) { s.Annotations = nil },
			refused: secretAnnotationsReserved,
		},
		{
			name:    "tenant adds a COSI annotation to a COSI Secret",
			before:  cosiSecret,
			as:      tenant,
			update:  cosiAnnotatedSecret,
			refused: secretAnnotationsReserved,
		},
		{
			name:   "tenant edits the data and its own annotations of an annotated COSI Secret",
			before: cosiAnnotatedSecret,
			as:     tenant,
			update: func(s *corev1.Secret) {
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, "example.com/note", "mine")
				s.Data = map[string][]byte{cosiapi.SecretKeyProtocol: []byte("S3")}
			},
		},
		{name: "tenant deletes an annotated COSI Secret", before: cosiAnnotatedSecret, as: tenant},
		{
			name:   "sidecar rewrites COSI's annotations",
			before: cosiAnnotatedSecret,
			as:     sidecar,
			update: func(s *corev1.Secret) {
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationSecretCheckInterval, "20m0s")
				delete(s.Annotations, cosiapi.AnnotationCredentialID)
			},
		},
		{
			name:   "tenant adds and removes finalizers of its own Secret",
			before: protected[*corev1.Secret],
			as:     tenant,
			update: func(s *corev1.Secret) {
				s.Finalizers = []string{"example.com/backup"}
			},
		},

		{
			name:     "sidecar removes its finalizer",
			before:   cosiSecret,
			deleting: true,
			as:       sidecar,
			update: func(s *corev1.Secret) {
				controllerutil.RemoveFinalizer(s, cosiapi.FinalizerProtection)
			},
		},
		{name: "sidecar rewrites a Secret's data", before: cosiSecret, as: sidecar, update: func(s *corev1.Secret) {
			s.Data = map[string][]byte{cosiapi.SecretKeyProtocol: []byte("S3"), cosiapi.SecretKeyS3BucketName: []byte("photos")}
		}},
	})
}

// cosiAnnotatedSecret makes s a COSI Secret with the annotations the sidecar writes.
func cosiAnnotatedSecret(s *corev1.Secret) {
	cosiSecret(s)
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationSecretCheckInterval, "10m0s")
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationSecretDataKeys, "COSI_PROTOCOL")
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationCredentialID, "key-1")
}

// secretAnnotationsReserved is the refusal of a tenant's change to COSI's annotations of a Secret.
const secretAnnotationsReserved = "metadata.annotations: the objectstorage.k8s.io/ annotations of a BucketAccess " +
	"Secret are reserved to COSI"
