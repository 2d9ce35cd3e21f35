package kubectlcosi

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// doctor runs doctor -o json as cfg's user and returns its exit code and report.
func doctor(t *testing.T, cfg *rest.Config, args ...string) (int, *kubectlcosi.DoctorReport) {
	t.Helper()
	code, out, errOut := run(t, cfg, append([]string{"doctor", "-o", "json"}, args...)...)
	r := &kubectlcosi.DoctorReport{}
	if err := json.Unmarshal([]byte(out), r); err != nil {
		t.Fatalf("exit %d, %v: %s%s", code, err, out, errOut)
	}
	return code, r
}

// finding returns the first check named name whose message contains text.
func finding(r *kubectlcosi.DoctorReport, name, text string) *kubectlcosi.Check {
	for i, c := range r.Checks {
		if c.Name == name && strings.Contains(c.Message, text) {
			return &r.Checks[i]
		}
	}
	return nil
}

func expectCheck(r *kubectlcosi.DoctorReport, name, status, text string) error {
	c := finding(r, name, text)
	if c == nil || c.Status != status {
		return fmt.Errorf("no %s check %s with %q: %+v", status, name, text, r.Checks)
	}
	return nil
}

// TestDoctor: on a healthy installation every check passes; then a driver's sidecar stops, an
// object is held by a foreign finalizer and an access's Secret is deleted, and doctor names each.
func TestDoctor(t *testing.T) {
	_, ba := healthy(t)
	testenv.Eventually(t, func() error {
		code, r := doctor(t, env.Config)
		for _, want := range [][3]string{
			{"crd/BucketClaim", kubectlcosi.CheckOK, "serves and stores v1alpha2"},
			{"admission/cosi-reserved-status", kubectlcosi.CheckOK, "installed and bound"},
			{"controller", kubectlcosi.CheckOK, "holds Lease cosi-system/cosi-controller"},
			{"sidecar/" + driverName, kubectlcosi.CheckOK, "holds Lease"},
			{"stuck", kubectlcosi.CheckOK, "no object"},
			{"secrets", kubectlcosi.CheckOK, "every provisioned BucketAccess has its Secrets"},
		} {
			if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
				return err
			}
		}
		if code != 0 {
			return fmt.Errorf("exit %d: %+v", code, r.Checks)
		}
		return nil
	})

	// A second driver, whose sidecar stops.
	stopped := "stopped.kubectl.cosi.io"
	endpoint := "unix://" + filepath.Join(t.TempDir(), "driver.sock")
	d, err := memory.New(memory.Config{Name: stopped})
	if err != nil {
		t.Fatal(err)
	}
	testenv.ServeDriver(t, endpoint, d)
	stop := testenv.StartSidecar(t, sidecarCfg, sidecarOptions(endpoint))
	class := objects.BucketClass(unique("class"), stopped, cosiapi.DeletionPolicyDelete)
	create(t, class)
	testenv.Eventually(t, func() error {
		_, r := doctor(t, env.Config)
		return expectCheck(r, "sidecar/"+stopped, kubectlcosi.CheckOK, "holds Lease")
	})
	stop()

	// A claim held by a finalizer that is not COSI's.
	held := objects.BucketClaim(namespace, unique("held"), class.Name, objects.S3)
	held.Finalizers = []string{"example.com/hold"}
	create(t, held)
	t.Cleanup(func() { release(held) })
	if err := env.Client.Delete(t.Context(), held); err != nil {
		t.Fatal(err)
	}

	// A Secret deleted by its tenant.
	secret := ba.Spec.BucketClaims[0].AccessSecretName
	if err := env.Client.Delete(t.Context(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: secret}}); err != nil {
		t.Fatal(err)
	}

	testenv.Eventually(t, func() error {
		code, r := doctor(t, env.Config, "--stuck-after", "1ms")
		for _, want := range [][3]string{
			{"sidecar/" + stopped, kubectlcosi.CheckFailed, "is released: a sidecar of driver " + stopped +
				" (named by BucketClass " + class.Name + ") is not running"},
			{"stuck", kubectlcosi.CheckFailed, "BucketClaim " + namespace + "/" + held.Name +
				" has been Terminating for"},
			{"stuck", kubectlcosi.CheckFailed, "example.com/hold (not COSI's)"},
			{"secrets", kubectlcosi.CheckWarning, "Secret " + namespace + "/" + secret},
			{"secrets", kubectlcosi.CheckWarning, "Secret " + namespace + "/" + secret + " of BucketAccess " + ba.Name +
				" was deleted"},
			{"secrets", kubectlcosi.CheckWarning, "(at the latest at " +
				deleted(t, secret).Add(secretCheckInterval*3/2).Local().Format("15:04") + ")"},
		} {
			if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
				return err
			}
		}
		if c := finding(r, "stuck", "Secret "+namespace+"/"+secret); c != nil {
			return fmt.Errorf("a Secret that waits for its sidecar's check is called stuck: %+v", c)
		}
		if code != 1 {
			return fmt.Errorf("exit %d, want 1", code)
		}
		return nil
	})
	show(t, env.Config, "doctor", "--stuck-after", "1ms")
	code, out, _ := run(t, env.Config, "doctor")
	if code != 1 || !strings.Contains(out, "FAILED   sidecar/"+stopped) {
		t.Errorf("text output (exit %d):\n%s", code, out)
	}
}

// TestDoctorNamespaceUser: with namespace rights only, doctor says what it could not see and
// looks at the namespace, instead of failing.
func TestDoctorNamespaceUser(t *testing.T) {
	healthy(t)
	_, r := doctor(t, viewer)
	for _, want := range [][3]string{
		{"crd/BucketClaim", kubectlcosi.CheckUnknown, "(Forbidden)"},
		{"admission", kubectlcosi.CheckUnknown, "(Forbidden)"},
		{"controller", kubectlcosi.CheckUnknown, "(Forbidden)"},
		{"visibility/BucketClaim", kubectlcosi.CheckUnknown, "looking in namespace " + namespace + " only"},
		{"secrets", kubectlcosi.CheckOK, "every provisioned BucketAccess has its Secrets"},
	} {
		if err := expectCheck(r, want[0], want[1], want[2]); err != nil {
			t.Error(err)
		}
	}
	if slices.ContainsFunc(r.Checks, func(c kubectlcosi.Check) bool { return c.Status == kubectlcosi.CheckFailed }) {
		t.Errorf("a failed check: %+v", r.Checks)
	}
}

// release removes every finalizer of the claim but COSI's.
func release(claim *cosiapi.BucketClaim) {
	ctx := context.Background()
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(claim), claim); err != nil {
			return client.IgnoreNotFound(err)
		}
		claim.Finalizers = slices.DeleteFunc(claim.Finalizers,
			func(f string) bool { return f != cosiapi.FinalizerProtection })
		return client.IgnoreNotFound(env.Client.Update(ctx, claim))
	})
}

// deleted returns the deletion time of the Secret name in namespace.
func deleted(t *testing.T, name string) time.Time {
	t.Helper()
	s := &corev1.Secret{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		t.Fatal(err)
	}
	if s.DeletionTimestamp == nil {
		t.Fatalf("Secret %s is not being deleted", name)
	}
	return s.DeletionTimestamp.Time
}

// TestDoctorBindingWithoutDeny: a binding of a policy that only warns or audits refuses nothing:
// tenants can write what COSI reserves. doctor must not call the policy in force.
func TestDoctorBindingWithoutDeny(t *testing.T) {
	const policy = "cosi-reserved-status"
	b := &admissionv1.ValidatingAdmissionPolicyBinding{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: policy}, b); err != nil {
		t.Fatal(err)
	}
	orig := b.Spec.ValidationActions
	b.Spec.ValidationActions = []admissionv1.ValidationAction{admissionv1.Warn, admissionv1.Audit}
	if err := env.Client.Update(t.Context(), b); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(context.Background(), client.ObjectKey{Name: policy}, b); err != nil {
				return err
			}
			b.Spec.ValidationActions = orig
			return env.Client.Update(context.Background(), b)
		})
	})
	code, r := doctor(t, env.Config)
	if err := expectCheck(r, "admission/"+policy, kubectlcosi.CheckFailed, "Deny"); err != nil || code != 1 {
		t.Errorf("exit %d: %v", code, err)
	}
}

// TestDoctorLeaseRenewedInTheFuture: a sidecar Lease whose renewTime is hours ahead (the holder's
// clock is wrong, or someone wrote it) says nothing about whether its holder still renews it.
// doctor must not call that sidecar running.
func TestDoctorLeaseRenewedInTheFuture(t *testing.T) {
	ghost := "ghost.kubectl.cosi.io"
	future := metav1.NewMicroTime(time.Now().Add(2 * time.Hour))
	create(t, objects.BucketClass(unique("class"), ghost, cosiapi.DeletionPolicyDelete),
		&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: cosiNamespace, Name: sidecar.LeaseName(ghost)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("ghost"), LeaseDurationSeconds: ptr.To[int32](15),
				AcquireTime: &future, RenewTime: &future},
		})
	_, r := doctor(t, env.Config)
	if c := finding(r, "sidecar/"+ghost, ""); c == nil || c.Status == kubectlcosi.CheckOK {
		t.Errorf("a Lease renewed two hours from now: %+v", c)
	}
}

// TestDoctorEverySecretMissing: in a namespace whose every access Secret is gone (deleted, and
// its finalizer removed by an admin), doctor as the namespace's user must name the missing
// Secrets, not say that it may not list Secrets.
func TestDoctorEverySecretMissing(t *testing.T) {
	ns := unique("team")
	if err := env.CreateNamespace(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	user := namespaceViewer(t, ns)
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName)
	claim := objects.BucketClaim(ns, unique("claim"), class.Name, objects.S3)
	ba := objects.BucketAccess(ns, unique("access"), aclass.Name,
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite))
	create(t, class, aclass, claim, ba)
	provisioned(t, ba, func() []metav1.Condition { return ba.Status.Conditions })
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim.Name + "-creds"}}
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	releaseAll(s, cosiapi.FinalizerProtection)
	env.Gone(t, s)

	_, r := doctor(t, user, "-n", ns)
	if err := expectCheck(r, "secrets", kubectlcosi.CheckWarning, "Secret "+ns+"/"+s.Name+" of BucketAccess "+ba.Name+
		" is missing"); err != nil {
		t.Error(err)
	}
}

// namespaceViewer is a user who may read COSI's namespaced objects, Secrets and Events in ns.
func namespaceViewer(t *testing.T, ns string) *rest.Config {
	t.Helper()
	read := []string{"get", "list", "watch"}
	name := unique("viewer")
	create(t,
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{cosiapi.GroupName}, Resources: []string{"bucketclaims", "bucketaccesses"}, Verbs: read},
			{APIGroups: []string{""}, Resources: []string{"secrets", "events"}, Verbs: read},
		}},
		&rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
		})
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: name}
	return cfg
}

// TestDoctorSidecarLeaseInItsOwnNamespace: the sidecars of a driver installed in another namespace
// than COSI's elect their leader there (their Pod's namespace): doctor must find that Lease, not
// say that none runs, and say what the controller needs to see it (a warning: anyone who may
// create Leases in that namespace could have written it).
func TestDoctorSidecarLeaseInItsOwnNamespace(t *testing.T) {
	elsewhere := "elsewhere.kubectl.cosi.io"
	ns := unique("driver-ns")
	if err := env.CreateNamespace(t.Context(), ns); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	create(t, objects.BucketClass(unique("class"), elsewhere, cosiapi.DeletionPolicyDelete),
		&coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: sidecar.LeaseName(elsewhere)},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("sidecar-0"), LeaseDurationSeconds: ptr.To[int32](3600),
				AcquireTime: &now, RenewTime: &now},
		})
	_, r := doctor(t, env.Config)
	if err := expectCheck(r, "sidecar/"+elsewhere, kubectlcosi.CheckWarning,
		"--sidecar-lease-namespaces="+ns); err != nil {
		t.Error(err)
	}
}
