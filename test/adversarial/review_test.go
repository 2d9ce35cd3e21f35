package adversarial

import (
	"encoding/base64"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// The tests of the review of issue 25 (an adversarial reading of f808b2c): each failed there.

// Issue 25, item 6 ("wrong protocol"): an access asking for a protocol its claim's bucket lacks,
// created while the bucket is still being created (the claim shows no protocols yet), is handed
// off by the controller and then refused by the sidecar (UnsupportedProtocol): it never had
// credentials, and must not keep its claim from being deleted.
func TestSidecarRefusedAccessDoesNotBlockClaimDeletion(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	s.faults.Set(0, memory.Fault{Method: "DriverCreateBucket", Code: codes.Unavailable, Rate: 1})
	c := newClaim(s.bucketClass(cosiapi.DeletionPolicyDelete).Name)
	mustCreate(t, tenant, c)
	refused := newAccess(s.accessClass().Name, c)
	refused.Spec.Protocol = cosiapi.ProtocolAzure
	mustCreate(t, tenant, refused)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(refused), refused); err != nil {
			return err
		}
		if refused.Status.DriverName == "" {
			return fmt.Errorf("%s not handed off yet: %+v", refused.Name, refused.Status.Conditions)
		}
		return nil
	})
	s.faults.Set(0)
	waitProvisioned(t, c)
	waitCondition(t, refused, cosiapi.ConditionResourcesValidated, metav1.ConditionFalse,
		cosiapi.ReasonUnsupportedProtocol)
	bucketID := boundBucket(t, c).Status.BucketID

	mustDelete(t, tenant, c)
	env.Gone(t, c)
	s.waitBucketDeleted(bucketID)
	if n := s.calls.Count("DriverGrantBucketAccess"); n != 0 {
		t.Errorf("%d grants for an access refused by the sidecar", n)
	}
}

// Issue 25, items 6 and 7: a BucketClass and a BucketAccessClass naming a driver that no sidecar
// serves. The claim's Bucket is created without the sidecar's finalizer and goes with its claim
// (item 7), but an access to the claim is handed off (KEP-1979: the Bucket must be known, not
// provisioned) and then waits, when deleted, for a sidecar that does not exist: the access never
// goes, and the claim, held by it, never goes either. Nothing was ever granted.
func TestAccessOfAnUnservedDriverCanBeDeleted(t *testing.T) {
	t.Parallel()
	driver := uniqueName("nobody") + ".adversarial.cosi.io"
	class := objects.BucketClass(uniqueName("class"), driver, cosiapi.DeletionPolicyDelete)
	mustCreate(t, env.Client, class)
	accessClass := objects.BucketAccessClass(uniqueName("accessclass"), driver)
	mustCreate(t, env.Client, accessClass)
	c := newClaim(class.Name)
	mustCreate(t, tenant, c)
	ba := newAccess(accessClass.Name, c)
	mustCreate(t, tenant, ba)
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if ba.Status.DriverName == "" {
			return fmt.Errorf("%s not handed off yet: %+v", ba.Name, ba.Status.Conditions)
		}
		return nil
	})
	b := boundBucket(t, c)

	mustDelete(t, tenant, ba)
	mustDelete(t, tenant, c)
	env.Gone(t, ba)
	env.Gone(t, c)
	env.Gone(t, b)
}

// Issue 25, item 21: a tenant deletes its COSI Secret while holding it Terminating with a
// finalizer of its own. The Secret cannot be written again while it exists; no grant follows
// (TestAttackTenantFinalizerOnDeletedSecret), but the access must show that its Secret cannot be
// written (ResourcesValidated False), not stay Provisioned and valid with its Secret on its way
// out.
func TestHeldTerminatingSecretShowsOnTheAccess(t *testing.T) {
	t.Parallel()
	s := newSystem(t)
	c := s.provisionedClaim(cosiapi.DeletionPolicyDelete)
	ba := s.provisionedAccess(s.accessClass().Name, c)
	sec := secret(t, ba)
	edit(t, tenant, sec, func(o *corev1.Secret) { controllerutil.AddFinalizer(o, "tenant.example.com/hold") })
	mustDelete(t, tenant, sec)
	t.Cleanup(func() {
		now := &corev1.Secret{}
		if env.Client.Get(t.Context(), client.ObjectKeyFromObject(sec), now) == nil {
			controllerutil.RemoveFinalizer(now, "tenant.example.com/hold")
			_ = env.Client.Update(t.Context(), now)
		}
	})
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(ba), ba); err != nil {
			return err
		}
		if !meta.IsStatusConditionFalse(ba.Status.Conditions, cosiapi.ConditionResourcesValidated) {
			return fmt.Errorf("the access's Secret is held Terminating, and its conditions say %+v",
				ba.Status.Conditions)
		}
		return nil
	})
}

// Issue 25, items 4 and 20: what docs/security.md says the sidecar's token can still learn under
// cosi-sidecar-secrets, checked with that token. A JSON patch is applied before admission runs, so
// a patch whose only operation tests a guessed value of any Secret answers whether the guess is
// right: a wrong guess fails the test (Invalid), a right one passes it and is refused by the
// policy (Forbidden). No admission policy can close that, only taking patch away (which the
// sidecar's own probe needs). What the policy does close: the Secret itself is never returned,
// and nothing is written.
func TestSidecarTokenConfirmsGuessesButReadsNothing(t *testing.T) {
	cfg, err := env.ServiceAccountTokenConfig(t.Context(), "config/rbac/sidecar/role.yaml", "cosi-system", "cosi-sidecar")
	if err != nil {
		t.Fatal(err)
	}
	sidecar, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	victim := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("pin"), Namespace: "kube-system"},
		StringData: map[string]string{"pin": "4711"},
	}
	mustCreate(t, env.Client, victim)
	installSidecarPolicy(t, sidecar)

	guess := func(pin string) (*corev1.Secret, error) {
		body := fmt.Sprintf(`[{"op":"test","path":"/data/pin","value":%q}]`,
			base64.StdEncoding.EncodeToString([]byte(pin)))
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: victim.Name, Namespace: victim.Namespace}}
		return s, sidecar.Patch(t.Context(), s, client.RawPatch(types.JSONPatchType, []byte(body)))
	}
	ws, wrong := guess("0000")
	rs, right := guess("4711")
	if !apierrors.IsInvalid(wrong) || !apierrors.IsForbidden(right) {
		t.Errorf("the documented answers changed: wrong guess %v, right guess %v", wrong, right)
	}
	for _, s := range []*corev1.Secret{ws, rs} {
		if len(s.Data) > 0 || s.UID != "" {
			t.Errorf("a patch by the sidecar's token returned the Secret %s", s.Name)
		}
	}
	now := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(victim), now); err != nil {
		t.Fatal(err)
	}
	if string(now.Data["pin"]) != "4711" || now.ResourceVersion != victim.ResourceVersion {
		t.Errorf("the Secret was changed by the sidecar's token")
	}
}
