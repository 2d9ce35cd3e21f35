package kubectlcosi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kubectlcosi"
	"github.com/kube-cosi/cosi/internal/sidecar"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// object returns the report's object of kind, or fails.
func object(t *testing.T, r *kubectlcosi.StatusReport, kind string) *kubectlcosi.Object {
	t.Helper()
	i := slices.IndexFunc(r.Objects, func(o *kubectlcosi.Object) bool { return o.Kind == kind })
	if i < 0 {
		t.Fatalf("no %s in the report: %+v", kind, r.Objects)
	}
	return r.Objects[i]
}

// waitForDiagnosis runs status until its sentence contains every want, and returns the report.
func waitForDiagnosis(t *testing.T, cfg *rest.Config, args []string, want ...string) *kubectlcosi.StatusReport {
	t.Helper()
	var r *kubectlcosi.StatusReport
	testenv.Eventually(t, func() error {
		r = status(t, cfg, args...)
		for _, w := range want {
			if !strings.Contains(r.Diagnosis.Sentence, w) {
				return fmt.Errorf("the sentence %q lacks %q", r.Diagnosis.Sentence, w)
			}
		}
		return nil
	})
	return r
}

// TestStatusHealthy: a provisioned claim and its access, as an admin and as a user who may only
// read the namespace (the Bucket is then not visible, and the report says so).
func TestStatusHealthy(t *testing.T) {
	claim, ba := healthy(t)

	r := status(t, env.Config, "claim", claim.Name)
	if !r.Diagnosis.Ready || !strings.Contains(r.Diagnosis.Sentence, "is provisioned (Bucket "+
		claim.Status.BoundBucketName+") and its 1 BucketAccess(es) are granted") {
		t.Errorf("diagnosis: %+v", r.Diagnosis)
	}
	if b := object(t, r, "Bucket"); b.Visibility != "found" || len(b.Conditions) == 0 {
		t.Errorf("Bucket: %+v", b)
	}
	if s := object(t, r, "Secret"); s.Visibility != "found" {
		t.Errorf("Secret: %+v", s)
	}

	r = status(t, viewer, "claim", claim.Name)
	if !r.Diagnosis.Ready {
		t.Errorf("as the namespace user: %+v", r.Diagnosis)
	}
	if b := object(t, r, "Bucket"); b.Visibility != "forbidden" {
		t.Errorf("as the namespace user, the Bucket: %+v", b)
	}
	if !slices.ContainsFunc(r.NotVisible, func(s string) bool { return strings.HasPrefix(s, "Bucket ") }) {
		t.Errorf("the report does not say the Bucket was not visible: %v", r.NotVisible)
	}

	r = status(t, viewer, "access", ba.Name)
	if !r.Diagnosis.Ready || !strings.Contains(r.Diagnosis.Sentence, "is granted and its Secrets are written") {
		t.Errorf("access: %+v", r.Diagnosis)
	}

	// Text and YAML too, with the flags before the arguments.
	code, out, _ := run(t, viewer, "-n", namespace, "status", "access", ba.Name)
	if code != 0 || !strings.HasPrefix(out, "BucketAccess "+ba.Name+" is granted") ||
		!strings.Contains(out, "Bucket "+claim.Status.BoundBucketName+": not visible (Forbidden") {
		t.Errorf("text output (exit %d):\n%s", code, out)
	}
	show(t, env.Config, "status", "claim", claim.Name)
	code, out, _ = run(t, env.Config, "status", "claim", claim.Name, "-o", "yaml")
	if code != 0 || !strings.Contains(out, "ready: true") {
		t.Errorf("yaml output (exit %d):\n%s", code, out)
	}
}

// TestStatusMissingClass: a claim whose BucketClass does not exist.
func TestStatusMissingClass(t *testing.T) {
	claim := objects.BucketClaim(namespace, unique("claim"), unique("missing-class"), objects.S3)
	create(t, claim)

	r := waitForDiagnosis(t, env.Config, []string{"claim", claim.Name},
		"waits for BucketClass "+claim.Spec.BucketClassName+", which does not exist", "the admin can fix it",
		"COSI creates the Bucket on its own as soon as the class exists")
	if r.Diagnosis.Ready || r.Diagnosis.Who != kubectlcosi.WhoAdmin {
		t.Errorf("diagnosis: %+v", r.Diagnosis)
	}
	// The user cannot see classes, but the claim's condition says it.
	waitForDiagnosis(t, viewer, []string{"claim", claim.Name}, "BucketClass "+claim.Spec.BucketClassName+
		" does not exist")
	show(t, env.Config, "status", "claim", claim.Name)
}

// TestStatusAccessRefusedByClass: an access asking for a mode its class forbids.
func TestStatusAccessRefusedByClass(t *testing.T) {
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName, func(c *cosiapi.BucketAccessClass) {
		c.Spec.DisallowedBucketAccessModes.ObjectData = []cosiapi.BucketAccessMode{cosiapi.BucketAccessModeReadWrite}
	})
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	ba := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite))
	create(t, class, aclass, claim, ba)

	for _, cfg := range []*rest.Config{env.Config, viewer} {
		r := waitForDiagnosis(t, cfg, []string{"access", ba.Name}, "BucketAccess "+ba.Name+":", "ReadWrite",
			"the user can fix it")
		if r.Diagnosis.Who != kubectlcosi.WhoUser {
			t.Errorf("who: %+v", r.Diagnosis)
		}
		show(t, cfg, "status", "access", ba.Name)
		testenv.Eventually(t, func() error {
			o := object(t, status(t, cfg, "access", ba.Name), "BucketAccess")
			if !slices.ContainsFunc(o.Events, func(e kubectlcosi.Event) bool { return e.Type == corev1.EventTypeWarning }) {
				return fmt.Errorf("no warning event in the report: %+v", o.Events)
			}
			if !slices.ContainsFunc(o.Conditions, func(c kubectlcosi.Condition) bool {
				return c.Reason == cosiapi.ReasonForbiddenByClass && c.Explanation != nil
			}) {
				return fmt.Errorf("no explained %s condition: %+v", cosiapi.ReasonForbiddenByClass, o.Conditions)
			}
			return nil
		})
	}
}

// TestStatusSecretDeleted: a tenant deletes the Secret of a granted access. COSI's finalizer keeps
// it until the sidecar's next Secret check (every secretCheckInterval): the report says when that
// is at the latest, from the interval the sidecar wrote on the Secret (and the half interval its
// rate limit on checks may add).
func TestStatusSecretDeleted(t *testing.T) {
	_, ba := healthy(t)
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName}
	if err := env.Client.Get(t.Context(), key, secret); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if err := env.Client.Get(t.Context(), key, secret); err != nil {
			return err
		}
		if secret.DeletionTimestamp == nil {
			return errors.New("not deleting yet")
		}
		return nil
	})
	latest := secret.DeletionTimestamp.Add(secretCheckInterval * 3 / 2).Local().Format("15:04")
	for _, cfg := range []*rest.Config{env.Config, viewer} {
		r := status(t, cfg, "access", ba.Name)
		for _, want := range []string{
			"Secret " + key.Name + " of BucketAccess " + ba.Name + " was deleted at",
			"nobody needs to act", "the sidecar writes it again at its next Secret check, at the latest at " + latest,
		} {
			if !strings.Contains(r.Diagnosis.Sentence, want) {
				t.Errorf("the sentence %q lacks %q", r.Diagnosis.Sentence, want)
			}
		}
		if s := object(t, r, "Secret"); s.Deleting == nil || !slices.Contains(s.Finalizers, cosiapi.FinalizerProtection) {
			t.Errorf("Secret: %+v", s)
		}
		show(t, cfg, "status", "access", ba.Name)
	}
}

// TestStatusNotFound: a claim that does not exist is a finding, not an error.
func TestStatusNotFound(t *testing.T) {
	r := status(t, viewer, "claim", "nothing-here")
	if r.Diagnosis.Ready || !strings.Contains(r.Diagnosis.Sentence, "does not exist") {
		t.Errorf("diagnosis: %+v", r.Diagnosis)
	}
	code, _, errOut := run(t, viewer, "status", "bucket", "x")
	if code != 2 || !strings.Contains(errOut, `unknown command "status bucket x"`) {
		t.Errorf("exit %d: %s", code, errOut)
	}
}

// TestStatusClassDeletedAfterProvisioning: an admin deletes the classes of a provisioned claim and
// of a granted access. Neither needs its class any more: both stay ready, and status must not say
// that they wait for it.
func TestStatusClassDeletedAfterProvisioning(t *testing.T) {
	claim, ba := healthy(t)
	for _, o := range []client.Object{
		&cosiapi.BucketClass{ObjectMeta: metav1.ObjectMeta{Name: claim.Spec.BucketClassName}},
		&cosiapi.BucketAccessClass{ObjectMeta: metav1.ObjectMeta{Name: ba.Spec.BucketAccessClassName}},
	} {
		if err := env.Client.Delete(t.Context(), o); err != nil {
			t.Fatal(err)
		}
		env.Gone(t, o)
	}
	for _, args := range [][]string{{"claim", claim.Name}, {"access", ba.Name}} {
		r := status(t, env.Config, args...)
		if !r.Diagnosis.Ready || strings.Contains(r.Diagnosis.Sentence, "does not exist") {
			t.Errorf("status %s: a provisioned object whose class was deleted since: %+v", args[0], r.Diagnosis)
		}
	}
}

// TestStatusForeignFinalizer: a claim and its access are deleted while a finalizer that is not
// COSI's holds them. Once COSI is done (access revoked, Bucket deleted, COSI's finalizers gone),
// only that finalizer keeps them: status must say so and name it, not tell the user that nobody
// needs to act or that COSI still works on it.
func TestStatusForeignFinalizer(t *testing.T) {
	const hold = "example.com/hold"
	claim, ba := healthy(t)
	for _, o := range []client.Object{claim, ba} {
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(o), o); err != nil {
				return err
			}
			controllerutil.AddFinalizer(o, hold)
			return env.Client.Update(t.Context(), o)
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { releaseAll(o, hold) })
	}
	for _, c := range []struct {
		obj  client.Object
		args []string
	}{{ba, []string{"access", ba.Name}}, {claim, []string{"claim", claim.Name}}} {
		if err := env.Client.Delete(t.Context(), c.obj); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, func() error {
			if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c.obj), c.obj); err != nil {
				return err
			}
			if f := c.obj.GetFinalizers(); !slices.Equal(f, []string{hold}) {
				return fmt.Errorf("%s: finalizers %v", c.obj.GetName(), f)
			}
			return nil
		})
		r := status(t, env.Config, c.args...)
		if r.Diagnosis.Ready || r.Diagnosis.Who == kubectlcosi.WhoNobody || !strings.Contains(r.Diagnosis.Sentence, hold) {
			t.Errorf("status %s, held only by %s: %+v", c.args[0], hold, r.Diagnosis)
		}
		show(t, env.Config, append([]string{"status"}, c.args...)...)
	}
}

// releaseAll removes the finalizer f from o, wherever o is in its life.
func releaseAll(o client.Object, f string) {
	ctx := context.Background()
	_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			return client.IgnoreNotFound(err)
		}
		if !controllerutil.RemoveFinalizer(o, f) {
			return nil
		}
		return client.IgnoreNotFound(env.Client.Update(ctx, o))
	})
}

// TestStatusClaimOfAccessWaitingForAnotherClaim: an access of two claims, one of which does not
// exist. status claim of the one that does must say what the access waits for and that its user
// can fix it, not that nobody needs to act.
func TestStatusClaimOfAccessWaitingForAnotherClaim(t *testing.T) {
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	aclass := objects.BucketAccessClass(unique("accessclass"), driverName, objects.MultiBucket)
	claim := objects.BucketClaim(namespace, unique("claim"), class.Name, objects.S3)
	missing := unique("missing-claim")
	ba := objects.BucketAccess(namespace, unique("access"), aclass.Name,
		objects.Grant(claim.Name, claim.Name+"-creds", objects.ReadWrite),
		objects.Grant(missing, missing+"-creds", objects.ReadWrite))
	create(t, class, aclass, claim, ba)
	visible(t, ba, accessConds(ba), cosiapi.ConditionProvisioned, cosiapi.ReasonWaitingForResources,
		cosiapi.EventWaitingForBucket, missing)
	for _, cfg := range []*rest.Config{env.Config, viewer} {
		r := waitForDiagnosis(t, cfg, []string{"claim", claim.Name}, "BucketAccess "+ba.Name, missing)
		if r.Diagnosis.Who != kubectlcosi.WhoUser || strings.Contains(r.Diagnosis.Sentence, "waits for waiting") {
			t.Errorf("status claim: %+v", r.Diagnosis)
		}
	}
	show(t, viewer, "status", "claim", claim.Name)
}

// TestStatusSecretLostKeys: a tenant edits the Secret of a granted access and removes its access
// key ID. A Pod gets no usable credentials until the sidecar's next Secret check writes it again:
// status must not call the access ready.
func TestStatusSecretLostKeys(t *testing.T) {
	_, ba := healthy(t)
	key := types.NamespacedName{Namespace: namespace, Name: ba.Spec.BucketClaims[0].AccessSecretName}
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), key, s); err != nil {
			return err
		}
		delete(s.Data, cosiapi.SecretKeyS3AccessKeyID)
		return env.Client.Update(t.Context(), s)
	}); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*rest.Config{env.Config, viewer} {
		r := status(t, cfg, "access", ba.Name)
		if r.Diagnosis.Ready || !strings.Contains(r.Diagnosis.Sentence, cosiapi.SecretKeyS3AccessKeyID) ||
			!strings.Contains(r.Diagnosis.Sentence, "next Secret check") {
			t.Errorf("status access, its Secret without %s: %+v", cosiapi.SecretKeyS3AccessKeyID, r.Diagnosis)
		}
	}
	show(t, viewer, "status", "access", ba.Name)
}

// TestStatusEventsOfEarlierObject: a user creates a claim with a misspelt class, deletes it and
// creates it again under the same name with the right class. The events of the first claim are
// not the second's: status must not show them.
func TestStatusEventsOfEarlierObject(t *testing.T) {
	class := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete)
	name := unique("claim")
	first := objects.BucketClaim(namespace, name, unique("misspelt"), objects.S3)
	create(t, class, first)
	visible(t, first, claimConds(first), cosiapi.ConditionResourcesValidated, cosiapi.ReasonWaitingForResources,
		cosiapi.EventWaitingForClass, first.Spec.BucketClassName)
	if err := env.Client.Delete(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	env.Gone(t, first)
	second := objects.BucketClaim(namespace, name, class.Name, objects.S3)
	create(t, second)
	provisioned(t, second, func() []metav1.Condition { return second.Status.Conditions })
	for _, e := range object(t, status(t, viewer, "claim", name), "BucketClaim").Events {
		if strings.Contains(e.Message, first.Spec.BucketClassName) {
			t.Errorf("status of the second claim shows an event of the first: %+v", e)
		}
	}
}

// TestStatusOverdue: status says when the sidecar acts next at the latest: a failing driver call
// is retried at most maxBackoff after its last failure, a deleted Secret written again at most a
// Secret check interval after its deletion. An hour later, with nothing having happened (the
// sidecar stopped), that time is in the past: status must say that it is overdue and who looks,
// not promise a time that has gone by.
func TestStatusOverdue(t *testing.T) {
	down := objects.BucketClass(unique("class"), driverName, cosiapi.DeletionPolicyDelete,
		objects.ClassParameters(map[string]string{memory.ParamRegion: unavailable}))
	retried := objects.BucketClaim(namespace, unique("claim"), down.Name, objects.S3)
	create(t, down, retried)
	visible(t, retried, claimConds(retried), cosiapi.ConditionProvisionFailed, cosiapi.ReasonDriverError,
		cosiapi.EventFailedCreateBucket, "Unavailable")
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: retried.Status.BoundBucketName}}
	visible(t, b, func() []metav1.Condition { return b.Status.Conditions }, cosiapi.ConditionProvisionFailed,
		cosiapi.ReasonDriverError, cosiapi.EventFailedCreateBucket, "; retrying in ")

	_, ba := healthy(t)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace,
		Name: ba.Spec.BucketClaims[0].AccessSecretName}}
	if err := env.Client.Delete(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	later := deleted(t, secret.Name).Add(time.Hour)

	for _, c := range []struct {
		run  func(*kubectlcosi.Command) error
		what string
	}{
		{func(cmd *kubectlcosi.Command) error { return cmd.StatusClaim(t.Context(), retried.Name) }, "a driver retry"},
		{func(cmd *kubectlcosi.Command) error { return cmd.StatusAccess(t.Context(), ba.Name) }, "a Secret check"},
	} {
		var out bytes.Buffer
		cmd := &kubectlcosi.Command{Client: env.Client, Namespace: namespace, COSINamespace: cosiNamespace,
			SecretCheckInterval: sidecar.DefaultSecretCheckInterval, Output: "json", Out: &out,
			Now: func() time.Time { return later }}
		if err := c.run(cmd); err != nil {
			t.Fatal(err)
		}
		r := &kubectlcosi.StatusReport{}
		if err := json.Unmarshal(out.Bytes(), r); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.Diagnosis.Sentence, "at the latest at") ||
			!strings.Contains(r.Diagnosis.Sentence, "kubectl cosi doctor") {
			t.Errorf("%s that is an hour overdue: %+v", c.what, r.Diagnosis)
		}
		t.Logf("%s, an hour later: %s", c.what, r.Diagnosis.Sentence)
	}
}
