package admission

import (
	"context"
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// Refusal messages of cosi-sidecar-secrets.
const (
	sidecarType  = "type: the COSI sidecar creates only Opaque Secrets"
	sidecarLabel = "metadata.labels[" + cosiapi.LabelBucketAccessUID +
		"]: the COSI sidecar creates only Secrets with it"
	sidecarOwner     = "metadata.ownerReferences: the COSI sidecar creates only Secrets controlled by the BucketAccess"
	sidecarFinalizer = "metadata.finalizers: the COSI sidecar creates only Secrets with " + cosiapi.FinalizerProtection
	sidecarMetadata  = "metadata: the COSI sidecar sets only objectstorage.k8s.io/ labels, annotations and finalizers"
	sidecarNotCOSIs  = "the COSI sidecar may change or delete only a Secret that COSI wrote for a BucketAccess"
	sidecarLabelKept = "metadata.labels[" + cosiapi.LabelBucketAccessUID +
		"]: the COSI sidecar never changes or removes it"
)

// TestSidecarCreatesSecrets: cosi-sidecar-secrets on create (issue 25, item 20). The sidecar, with
// its ServiceAccount's own token and its generated role (which may create Secrets of any type in
// every namespace), creates only Secrets shaped as it writes them: no ServiceAccount token, no
// Secret without COSI's label, finalizer and controlling BucketAccess, no label or annotation that
// another controller acts on. Tenants and admins are not restricted by it.
func TestSidecarCreatesSecrets(t *testing.T) {
	waitForPolicies(t)
	withoutOwner := func(s *corev1.Secret) { accessSecret(s); s.OwnerReferences = nil }
	owner := func(mutate func(*metav1.OwnerReference)) func(*corev1.Secret) {
		return func(s *corev1.Secret) { accessSecret(s); mutate(&s.OwnerReferences[0]) }
	}
	runCreates(t, newSecret, []createCase[*corev1.Secret]{
		{name: "sidecar writes an access Secret", as: sidecar, mutate: accessSecret},
		{
			name:    "sidecar creates a ServiceAccount token in kube-system",
			as:      sidecar,
			mutate:  serviceAccountToken,
			refused: sidecarType,
		},
		{
			name:    "sidecar creates a ServiceAccount token shaped as an access Secret",
			as:      sidecar,
			mutate:  func(s *corev1.Secret) { accessSecret(s); serviceAccountToken(s) },
			refused: sidecarType,
		},
		{
			name: "sidecar creates an access Secret that names a ServiceAccount",
			as:   sidecar,
			mutate: func(s *corev1.Secret) {
				accessSecret(s)
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, corev1.ServiceAccountNameKey, "namespace-controller")
			},
			refused: sidecarMetadata,
		},
		{name: "sidecar creates an Opaque Secret of its own", as: sidecar, refused: sidecarLabel},
		{name: "sidecar creates an access Secret without an owner", as: sidecar, mutate: withoutOwner, refused: sidecarOwner},
		{
			name:    "sidecar creates an access Secret owned by another access",
			as:      sidecar,
			mutate:  owner(func(r *metav1.OwnerReference) { r.UID = "3f2b9c1e-0000-4000-8000-000000000009" }),
			refused: sidecarOwner,
		},
		{
			name:    "sidecar creates an access Secret its access does not control",
			as:      sidecar,
			mutate:  owner(func(r *metav1.OwnerReference) { r.Controller = nil }),
			refused: sidecarOwner,
		},
		{
			name:    "sidecar creates an access Secret owned by a claim",
			as:      sidecar,
			mutate:  owner(func(r *metav1.OwnerReference) { r.Kind, r.BlockOwnerDeletion = "BucketClaim", nil }),
			refused: sidecarOwner,
		},
		{
			name: "sidecar creates an access Secret without COSI's finalizer",
			as:   sidecar,
			mutate: func(s *corev1.Secret) {
				accessSecret(s)
				s.Finalizers = nil
			},
			refused: sidecarFinalizer,
		},
		{
			name: "sidecar creates an access Secret that another controller acts on (label)",
			as:   sidecar,
			mutate: func(s *corev1.Secret) {
				accessSecret(s)
				metav1.SetMetaDataLabel(&s.ObjectMeta, "argocd.argoproj.io/secret-type", "cluster")
			},
			refused: sidecarMetadata,
		},
		{
			name: "sidecar creates an access Secret that another controller acts on (annotation)",
			as:   sidecar,
			mutate: func(s *corev1.Secret) {
				accessSecret(s)
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, "replicator.v1.mittwald.de/replicate-from", "kube-system/admin")
			},
			refused: sidecarMetadata,
		},
		{
			name: "sidecar creates an access Secret with a finalizer of another controller",
			as:   sidecar,
			mutate: func(s *corev1.Secret) {
				accessSecret(s)
				s.Finalizers = append(s.Finalizers, "example.com/hold")
			},
			refused: sidecarMetadata,
		},
		{
			name:    "sidecar bound in the namespace only creates an Opaque Secret of its own",
			as:      namespacedSidecar,
			refused: sidecarLabel,
		},
		{name: "tenant creates an Opaque Secret", as: tenant},
		{name: "admin creates a ServiceAccount token in kube-system", as: admin, mutate: serviceAccountToken},
		{name: "cluster-admin creates a ServiceAccount token in kube-system", as: clusterAdmin, mutate: serviceAccountToken},
	})
}

// A secretRequest is one request about a Secret that the admin created first, and the answer
// cosi-sidecar-secrets must give.
type secretRequest struct {
	name string
	// before shapes the Secret the admin creates; nil leaves it a tenant's own Secret.
	before func(*corev1.Secret)
	// deleting: the admin deletes the Secret first, so that the request finds it Terminating.
	deleting bool
	as       actor
	// request sends the request about the Secret, into target (only its name and namespace set):
	// what the API server answered lands there.
	request func(ctx context.Context, c client.Client, s, target *corev1.Secret) error
	// refused is what the refusal message must say; empty: allowed. invalid: the request fails
	// before admission (a JSON patch test that does not hold), as for any principal.
	refused string
	invalid bool
}

// Requests as the sidecar sends them (internal/sidecar/secrets.go), and the ones it never sends.
var (
	// emptyMergePatch changes nothing and returns the Secret: a read, for whoever may patch.
	emptyMergePatch = rawPatch(types.MergePatchType, "{}")
	emptyJSONPatch  = rawPatch(types.JSONPatchType, "[]")
	// probe is the sidecar's probeSecret: a JSON patch whose only operation tests the label.
	probe = func(ctx context.Context, c client.Client, _, target *corev1.Secret) error {
		return testPatch(ctx, c, target, "/metadata/labels/objectstorage.k8s.io~1bucketaccess-uid", testUID)
	}
	// probeOwner is probeSecret when deleting: the test of the first owner's UID.
	probeOwner = func(ctx context.Context, c client.Client, _, target *corev1.Secret) error {
		return testPatch(ctx, c, target, "/metadata/ownerReferences/0/uid", testUID)
	}
	writeData = rawPatch(types.MergePatchType, `{"data":{"BUCKET_NAME":"ZXZpbA=="}}`)
	// rewrite is writeSecret on an existing access Secret: data, label, annotations and
	// finalizer, a merge patch locked to the version it read.
	rewrite = locked(func(s *corev1.Secret) {
		s.Data = map[string][]byte{cosiapi.SecretKeyProtocol: []byte("S3"), cosiapi.SecretKeyS3BucketName: []byte("photos")}
		metav1.SetMetaDataLabel(&s.ObjectMeta, cosiapi.LabelBucketAccessUID, testUID)
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationBucketAccessReference, s.Namespace+"/access")
		controllerutil.AddFinalizer(s, cosiapi.FinalizerProtection)
	})
	// release is releaseSecret and the first step of deleteAccessSecrets.
	release = func(ctx context.Context, c client.Client, s, _ *corev1.Secret) error {
		return patch.RemoveFinalizer(ctx, c, s)
	}
	deleteIt = func(ctx context.Context, c client.Client, s, _ *corev1.Secret) error {
		return c.Delete(ctx, s, client.Preconditions{UID: &s.UID})
	}
	// dryRunDelete deletes nothing and, on a Secret with a finalizer, returns it.
	dryRunDelete = func(ctx context.Context, c client.Client, s, _ *corev1.Secret) error {
		return c.Delete(ctx, s, client.DryRunAll)
	}
	replace = func(ctx context.Context, c client.Client, s, _ *corev1.Secret) error {
		s.Data = map[string][]byte{"password": []byte("the sidecar's")}
		return c.Update(ctx, s)
	}
)

// TestSidecarChangesSecrets: cosi-sidecar-secrets on update and delete (issue 25, item 20). The
// sidecar reads, changes and deletes only Secrets COSI wrote for a BucketAccess (its label, or a
// BucketAccess owner): a tenant's Secret is refused to it even with a patch that changes nothing,
// which would otherwise return the Secret. On its own Secrets, everything secrets.go does passes:
// the probe, the rewrite, releasing and deleting, also of a Secret whose label a tenant removed.
func TestSidecarChangesSecrets(t *testing.T) {
	waitForPolicies(t)
	ownedOnly := func(s *corev1.Secret) { accessSecret(s); delete(s.Labels, cosiapi.LabelBucketAccessUID) }
	withTenantMetadata := func(s *corev1.Secret) {
		accessSecret(s)
		metav1.SetMetaDataLabel(&s.ObjectMeta, "app", "gallery")
		metav1.SetMetaDataAnnotation(&s.ObjectMeta, "reflector.example.com/reflect", "true")
	}
	cases := []secretRequest{
		{name: "reads a tenant's Secret with an empty merge patch", request: emptyMergePatch, refused: sidecarNotCOSIs},
		{name: "reads a tenant's Secret with an empty JSON patch", request: emptyJSONPatch, refused: sidecarNotCOSIs},
		{name: "reads a tenant's Secret with a dry-run delete", request: dryRunDelete, refused: sidecarNotCOSIs},
		{name: "probes a tenant's Secret", request: probe, invalid: true},
		{name: "patches a tenant Secret's data", request: writeData, refused: sidecarNotCOSIs},
		{name: "replaces a tenant's Secret", request: replace, refused: sidecarNotCOSIs},
		{name: "deletes a tenant's Secret", request: deleteIt, refused: sidecarNotCOSIs},

		{name: "probes its Secret", before: accessSecret, request: probe},
		{name: "rewrites its Secret", before: accessSecret, request: rewrite},
		{name: "rewrites its Secret that a tenant labelled and annotated", before: withTenantMetadata, request: rewrite},
		{name: "releases its deleted Secret", before: accessSecret, deleting: true, request: release},
		{name: "releases its Secret", before: accessSecret, request: release},
		{name: "deletes its Secret", before: accessSecret, request: deleteIt},
		{name: "probes its Secret whose label was removed, by owner", before: ownedOnly, request: probeOwner},
		{name: "releases its Secret whose label was removed", before: ownedOnly, request: release},
		{name: "deletes its Secret whose label was removed", before: ownedOnly, request: deleteIt},

		{
			name: "moves its Secret to another access", before: accessSecret, refused: sidecarLabelKept,
			request: locked(func(s *corev1.Secret) {
				metav1.SetMetaDataLabel(&s.ObjectMeta, cosiapi.LabelBucketAccessUID, "3f2b9c1e-0000-4000-8000-000000000009")
			}),
		},
		{
			name: "removes the label of its Secret", before: accessSecret, refused: sidecarLabelKept,
			request: locked(func(s *corev1.Secret) { delete(s.Labels, cosiapi.LabelBucketAccessUID) }),
		},
		{
			name: "adds an annotation that another controller acts on", before: accessSecret, refused: sidecarMetadata,
			request: locked(func(s *corev1.Secret) {
				metav1.SetMetaDataAnnotation(&s.ObjectMeta, "replicator.v1.mittwald.de/replicate-from", "kube-system/admin")
			}),
		},
		{
			name: "removes a tenant's label", before: withTenantMetadata, refused: sidecarMetadata,
			request: locked(func(s *corev1.Secret) { delete(s.Labels, "app") }),
		},
		{
			name: "adds a finalizer of another controller", before: accessSecret, refused: sidecarMetadata,
			request: locked(func(s *corev1.Secret) { controllerutil.AddFinalizer(s, "example.com/hold") }),
		},
	}
	for i := range cases {
		cases[i].name = "sidecar " + cases[i].name
		cases[i].as = sidecar
	}
	cases = append(cases,
		secretRequest{name: "tenant reads its Secret with an empty merge patch", as: tenant, request: emptyMergePatch},
		secretRequest{name: "tenant patches its Secret's data", as: tenant, request: writeData},
		secretRequest{name: "admin deletes a tenant's Secret", as: admin, request: deleteIt},
		secretRequest{name: "cluster-admin patches a tenant Secret's data", as: clusterAdmin, request: writeData},
		secretRequest{
			name: "sidecar bound in the namespace only reads a tenant's Secret with an empty merge patch",
			as:   namespacedSidecar, request: emptyMergePatch, refused: sidecarNotCOSIs,
		},
	)
	runSecretRequests(t, cases)
}

func runSecretRequests(t *testing.T, cases []secretRequest) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newSecret()
			s.StringData = map[string]string{"password": "the tenant's"}
			if tc.before != nil {
				tc.before(s)
			}
			if err := env.Client.Create(t.Context(), s); err != nil {
				t.Fatal(err)
			}
			if tc.deleting {
				if err := env.Client.Delete(t.Context(), s); err != nil {
					t.Fatal(err)
				}
			}
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
				t.Fatal(err)
			}
			target := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: s.Name, Namespace: s.Namespace}}
			err := tc.request(t.Context(), tc.as, s, target)
			switch {
			case tc.invalid:
				if !apierrors.IsInvalid(err) {
					t.Errorf("%v; want Invalid, before admission", err)
				}
			default:
				answer(t, err, tc.refused)
			}
			if err != nil && len(target.Data) > 0 {
				t.Errorf("refused, and yet the Secret's data was returned")
			}
		})
	}
}

// secretOp is a request on a Secret: s is the Secret as read, target the object to send.
type secretOp = func(ctx context.Context, c client.Client, s, target *corev1.Secret) error

func rawPatch(pt types.PatchType, body string) secretOp {
	return func(ctx context.Context, c client.Client, _, target *corev1.Secret) error {
		return c.Patch(ctx, target, client.RawPatch(pt, []byte(body)))
	}
}

// testPatch is the sidecar's probe: a JSON patch whose only operation tests path.
func testPatch(ctx context.Context, c client.Client, target *corev1.Secret, path, value string) error {
	body, err := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": value}})
	if err != nil {
		return err
	}
	return c.Patch(ctx, target, client.RawPatch(types.JSONPatchType, body))
}

// locked changes the Secret with a merge patch locked to its version, as the sidecar writes.
func locked(mutate func(*corev1.Secret)) secretOp {
	return func(ctx context.Context, c client.Client, s, _ *corev1.Secret) error {
		orig := s.DeepCopy()
		mutate(s)
		return c.Patch(ctx, s, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
	}
}

// testUID is the UID of the BucketAccess of cosiSecret and accessSecret.
const testUID = "3f2b9c1e-0000-4000-8000-000000000001"

// accessSecret makes s an access Secret as the sidecar writes it (internal/sidecar/secrets.go,
// writeSecret): Opaque, COSI's label and finalizer and annotations, and its BucketAccess as
// controlling owner.
func accessSecret(s *corev1.Secret) {
	cosiSecret(s)
	s.Type = corev1.SecretTypeOpaque
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationBucketAccessReference, s.Namespace+"/access")
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, cosiapi.AnnotationBucketClaimReference, s.Namespace+"/data")
	access := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Name: "access", UID: testUID}}
	s.OwnerReferences = []metav1.OwnerReference{
		*metav1.NewControllerRef(access, cosiapi.SchemeGroupVersion.WithKind("BucketAccess")),
	}
}

// serviceAccountToken makes s a token Secret of kube-system's namespace controller: whoever may
// create it gets that ServiceAccount's token, once the token controller fills it in.
func serviceAccountToken(s *corev1.Secret) {
	s.Namespace = "kube-system"
	s.Type = corev1.SecretTypeServiceAccountToken
	metav1.SetMetaDataAnnotation(&s.ObjectMeta, corev1.ServiceAccountNameKey, "namespace-controller")
	s.StringData = nil
}
