package admission

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestReservedMetadata: a tenant may not add, change or remove COSI's annotations or protection
// finalizer on claims and accesses; COSI's components and admins may; everything else stays the
// tenant's to edit.
func TestReservedMetadata(t *testing.T) {
	waitForPolicies(t)
	c := newClaim(tenantNamespace, "standard")
	controllerutil.AddFinalizer(c, cosiapi.FinalizerProtection)
	metav1.SetMetaDataAnnotation(&c.ObjectMeta, cosiapi.AnnotationHasBucketAccessReferences, "true")
	if err := env.Client.Create(t.Context(), c); err != nil {
		t.Fatal(err)
	}
	ba := newAccess(tenantNamespace, "read-only")
	controllerutil.AddFinalizer(ba, cosiapi.FinalizerProtection)
	if err := env.Client.Create(t.Context(), ba); err != nil {
		t.Fatal(err)
	}

	refused(t, "tenant removes the claim's finalizer", update(t, tenant, c, func(o *cosiapi.BucketClaim) {
		controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection)
	}), "metadata.finalizers: objectstorage.k8s.io/protection is reserved to COSI")
	refused(t, "tenant removes the reference annotation", update(t, tenant, c, func(o *cosiapi.BucketClaim) {
		delete(o.Annotations, cosiapi.AnnotationHasBucketAccessReferences)
	}), "metadata.annotations["+cosiapi.AnnotationHasBucketAccessReferences+"]")
	refused(t, "tenant changes the reference annotation", update(t, tenant, c, func(o *cosiapi.BucketClaim) {
		o.Annotations[cosiapi.AnnotationHasBucketAccessReferences] = "false"
	}), "metadata.annotations["+cosiapi.AnnotationHasBucketAccessReferences+"]")
	refused(t, "tenant sets sidecar-cleanup-finished", update(t, tenant, ba, func(o *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&o.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
	}), "metadata.annotations["+cosiapi.AnnotationSidecarCleanupFinished+"]")
	refused(t, "tenant removes the access's finalizer", update(t, tenant, ba, func(o *cosiapi.BucketAccess) {
		controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection)
	}), "metadata.finalizers")
	refused(t, "tenant creates an access that claims to be cleaned up", func() error {
		forged := newAccess(tenantNamespace, "read-only")
		metav1.SetMetaDataAnnotation(&forged.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
		return tenant.Create(t.Context(), forged)
	}(), "metadata.annotations["+cosiapi.AnnotationSidecarCleanupFinished+"]")

	allowed(t, "tenant edits its own labels and annotations", update(t, tenant, c, func(o *cosiapi.BucketClaim) {
		metav1.SetMetaDataLabel(&o.ObjectMeta, "team", "photos")
		metav1.SetMetaDataAnnotation(&o.ObjectMeta, "example.com/owner", "alice")
	}))
	allowed(t, "tenant adds a finalizer of its own", update(t, tenant, ba, func(o *cosiapi.BucketAccess) {
		controllerutil.AddFinalizer(o, "example.com/backup")
	}))
	allowed(t, "tenant creates a claim with the finalizer", tenant.Create(t.Context(), func() *cosiapi.BucketClaim {
		o := newClaim(tenantNamespace, "standard")
		controllerutil.AddFinalizer(o, cosiapi.FinalizerProtection)
		return o
	}()))
	allowed(t, "COSI's sidecar sets sidecar-cleanup-finished", update(t, component, ba, func(o *cosiapi.BucketAccess) {
		metav1.SetMetaDataAnnotation(&o.ObjectMeta, cosiapi.AnnotationSidecarCleanupFinished, "true")
	}))
	allowed(t, "an admin removes the reference annotation", update(t, env.Client, c, func(o *cosiapi.BucketClaim) {
		delete(o.Annotations, cosiapi.AnnotationHasBucketAccessReferences)
	}))
	allowed(t, "tenant deletes a claim that has the finalizer", tenant.Delete(t.Context(), c))
	allowed(t, "an admin removes the finalizer of a deleting claim", update(t, env.Client, c, func(o *cosiapi.BucketClaim) {
		controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection)
	}))
}

// TestReservedStatus: a tenant whose Role includes the status subresources still cannot write
// them; COSI's components can.
func TestReservedStatus(t *testing.T) {
	waitForPolicies(t)
	ba := newAccess(tenantNamespace, "read-only")
	if err := env.Client.Create(t.Context(), ba); err != nil {
		t.Fatal(err)
	}
	forge := func(o *cosiapi.BucketAccess) {
		o.Status.DriverName = "s3.example.com"
		o.Status.AccessedBuckets = []cosiapi.AccessedBucket{{BucketClaimName: "data", BucketName: "someone-elses"}}
	}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	forge(ba)
	refused(t, "tenant writes bucketaccesses/status", tenant.Status().Update(t.Context(), ba), "status: the status of bucketaccesses is reserved to COSI")
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
		t.Fatal(err)
	}
	forge(ba)
	allowed(t, "COSI's sidecar writes bucketaccesses/status", component.Status().Update(t.Context(), ba))
}

// TestReservedSecrets: the finalizer and label of a COSI Secret are COSI's; the rest of it, and
// every other Secret, stay the tenant's.
func TestReservedSecrets(t *testing.T) {
	waitForPolicies(t)
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("creds"), Namespace: tenantNamespace,
		Labels: map[string]string{cosiapi.LabelBucketAccessUID: "3f2b9c1e-0000-4000-8000-000000000001"}, Finalizers: []string{cosiapi.FinalizerProtection}},
		StringData: map[string]string{cosiapi.SecretKeyProtocol: "S3"}}
	if err := env.Client.Create(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	refused(t, "tenant removes a COSI Secret's finalizer", update(t, tenant, s, func(o *corev1.Secret) {
		controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection)
	}), "metadata.finalizers: objectstorage.k8s.io/protection on a BucketAccess Secret is reserved to COSI")
	refused(t, "tenant removes a COSI Secret's label", update(t, tenant, s, func(o *corev1.Secret) {
		delete(o.Labels, cosiapi.LabelBucketAccessUID)
	}), "metadata.labels["+cosiapi.LabelBucketAccessUID+"]")
	allowed(t, "tenant annotates a COSI Secret", update(t, tenant, s, func(o *corev1.Secret) {
		metav1.SetMetaDataAnnotation(&o.ObjectMeta, "reflector.example.com/reflect", "true")
	}))
	allowed(t, "COSI's sidecar removes the finalizer", update(t, component, s, func(o *corev1.Secret) {
		controllerutil.RemoveFinalizer(o, cosiapi.FinalizerProtection)
	}))

	own := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("own"), Namespace: tenantNamespace, Finalizers: []string{cosiapi.FinalizerProtection}}}
	if err := tenant.Create(t.Context(), own); err != nil {
		t.Fatal(err)
	}
	allowed(t, "tenant edits the finalizers of its own Secret", update(t, tenant, own, func(o *corev1.Secret) { o.Finalizers = nil }))
}

// TestAllowedClasses: an annotated namespace may use only the classes its annotations list; other
// namespaces any.
func TestAllowedClasses(t *testing.T) {
	waitForPolicies(t)
	refused(t, "claim of a class the namespace may not use", tenant.Create(t.Context(), newClaim(restrictedNamespace, "premium")),
		"spec.bucketClassName: premium is not allowed in namespace "+restrictedNamespace)
	refused(t, "access of a class the namespace may not use", tenant.Create(t.Context(), newAccess(restrictedNamespace, "read-write")),
		"spec.bucketAccessClassName: read-write is not allowed in namespace "+restrictedNamespace)
	allowed(t, "claim of an allowed class", tenant.Create(t.Context(), newClaim(restrictedNamespace, "archive")))
	allowed(t, "access of an allowed class", tenant.Create(t.Context(), newAccess(restrictedNamespace, "read-only")))
	static := newClaim(restrictedNamespace, "")
	static.Spec.BucketClassName, static.Spec.ExistingBucketName = "", "imported"
	allowed(t, "claim of an imported bucket", tenant.Create(t.Context(), static))
	allowed(t, "any class in a namespace without the annotation", tenant.Create(t.Context(), newClaim(tenantNamespace, "premium")))
}
