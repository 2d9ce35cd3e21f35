package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/objects"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// plantedNamespace holds what the self-check plants in the API.
const plantedNamespace = "chaos-planted"

// plantedDriver is the driver of the planted Bucket objects: none serves it.
const plantedDriver = "planted.chaos.cosi.io"

// plantFinalizer holds the planted claim in Terminating.
const plantFinalizer = "chaos.cosi.kube-cosi.io/hold"

// plant is one planted violation: the check that must report it, and the object it names.
type plant struct{ check, object string }

// selfCheck plants violations once the run converged, behind COSI's back, as a broken component
// or a careless admin would, and audits again: each must be found, or the audit could miss what
// it exists to find. Every check has at least one plant; some have several, each a way a leak
// could hide from a simpler audit ("Attack on the audit" in docs/reliability.md). It returns the
// checks that found their plants.
func (r *run) selfCheck(ctx context.Context) (map[string]bool, error) {
	d, err := r.driverClient(ctx)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	var plants []plant
	want := func(check, object string) { plants = append(plants, plant{check, object}) }
	s3 := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	// A backend bucket and an account (with a key) that nothing accounts for.
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "planted-orphan",
		Protocols: s3}); err != nil {
		return nil, err
	}
	want(CheckOrphanBucket, "backend bucket planted-orphan")
	grant, err := d.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: "planted-account", Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets: []*cosiproto.AccessedBucket{{BucketId: "planted-orphan",
			AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}}},
	})
	if err != nil {
		return nil, err
	}
	want(CheckOrphanAccount, "backend account planted-account")
	// That key, as if a deleted access had held it: it must be refused.
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-deleted"},
		uid: "planted-deleted-uid", keys: []seenKey{{secret: "planted", bucketID: "planted-orphan",
			creds: grant.GetCredentials()}}})
	want(CheckLiveKey, "BucketAccess "+plantedNamespace+"/planted-deleted")
	// A backend bucket that only a Bucket of another driver names: it does not account for it.
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "planted-foreign",
		Protocols: s3}); err != nil {
		return nil, err
	}
	want(CheckOrphanBucket, "backend bucket planted-foreign")

	// The victims: kept claims and accesses, each used by one plant.
	r.ledger.mu.Lock()
	var victim, twice, shared *claimRecord
	for _, c := range r.ledger.claims {
		switch {
		case !c.plan.keep || c.uid == "" || c.namespace == plantedNamespace:
		case victim == nil && !c.plan.static && c.bucketID != "":
			victim = c
		case twice == nil:
			twice = c
		case shared == nil && c.bucketID != "":
			shared = c
		}
	}
	var cut, minted, widened, lent, rotated, stuck *accessRecord
	var candidates []*accessRecord
	for _, a := range r.ledger.accesses {
		if !a.plan.keep || a.accountID == "" || len(a.keys) == 0 || slices.ContainsFunc(a.keys, func(k seenKey) bool {
			return victim != nil && k.bucketID == victim.bucketID
		}) {
			continue
		}
		// The rotation plants first, for they take only an access that does not rotate
		// periodically: a rotation that starts before the audit would hide the planted one (the
		// audit checks replaced keys once no rotation runs). Any access does for the others.
		switch {
		case rotated == nil && !a.plan.periodic:
			rotated = a
		case stuck == nil && !a.plan.periodic:
			stuck = a
		default:
			candidates = append(candidates, a)
		}
	}
	for _, a := range candidates {
		switch {
		case cut == nil:
			cut = a
		case minted == nil:
			minted = a
		case widened == nil:
			widened = a
		case lent == nil:
			lent = a
		}
	}
	r.ledger.mu.Unlock()
	// A kept claim's bucket deleted in the backend.
	if victim != nil {
		if err := r.backend.deleteBucket(ctx, d, victim.bucketID); err != nil {
			return nil, err
		}
		want(CheckLostBucket, "backend bucket "+victim.bucketID)
	}
	// A kept access's key revoked behind COSI's back (one that does not reach the victim's bucket,
	// whose keys fail with it).
	if cut != nil {
		req := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: cut.accountID, Protocol: cosiproto.ObjectProtocol_S3,
			AuthenticationType: cosiproto.AuthenticationType_KEY}
		for _, k := range cut.keys {
			req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: k.bucketID})
		}
		if _, err := d.DriverRevokeBucketAccess(ctx, req); err != nil {
			return nil, err
		}
		want(CheckLostKey, "BucketAccess "+cut.namespace+"/"+cut.plan.name)
	}
	// A kept access granted once more, as a late call would: a new key that no Secret holds, on
	// an account that its access accounts for, while the Secret's key still works.
	if minted != nil {
		live := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: minted.namespace, Name: minted.plan.name}}
		if err := r.get(ctx, live); err != nil {
			return nil, err
		}
		if _, err := d.DriverGrantBucketAccess(ctx, grantRequest(live)); err != nil {
			return nil, err
		}
		want(CheckStrayKey, "BucketAccess "+minted.namespace+"/"+minted.plan.name)
	}
	// A kept access's account granted a bucket that its access does not reach.
	if widened != nil {
		live := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: widened.namespace,
			Name: widened.plan.name}}
		if err := r.get(ctx, live); err != nil {
			return nil, err
		}
		if err := r.backend.widen(ctx, d, live, "planted-orphan"); err != nil {
			return nil, err
		}
		want(CheckWideGrant, "BucketAccess "+widened.namespace+"/"+widened.plan.name)
	}
	// A kept access rotated behind COSI's back and its Secrets written with the new key, the key
	// it replaced never retired: a rotation that ended without its last step.
	if rotated != nil {
		if err := r.plantRotated(ctx, d, rotated); err != nil {
			return nil, err
		}
		want(CheckRotatedKey, "BucketAccess "+rotated.namespace+"/"+rotated.plan.name)
	}
	// A kept access's rotation stuck half-way in its grant record: its Secrets written, the
	// retirement of the old key put off for a year.
	if stuck != nil {
		if err := r.plantStuckRotation(ctx, stuck); err != nil {
			return nil, err
		}
		want(CheckRotation, "BucketAccess "+stuck.namespace+"/"+stuck.plan.name)
	}
	// A kept claim and a kept access that vanished (in the ledger only: the audit must notice that
	// what it was told to keep is gone).
	r.ledger.addClaim(&claimRecord{namespace: plantedNamespace, plan: claimPlan{name: "planted-kept", keep: true},
		uid: "planted-kept-claim-uid"})
	want(CheckClaim, "BucketClaim "+plantedNamespace+"/planted-kept")
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-kept", keep: true},
		uid: "planted-kept-access-uid"})
	want(CheckAccess, "BucketAccess "+plantedNamespace+"/planted-kept")

	if err := r.plantObjects(ctx, want, twice, shared, lent); err != nil {
		return nil, err
	}

	violations, err := r.audit(ctx)
	if err != nil {
		return nil, err
	}
	reported := map[plant]bool{}
	for _, v := range violations {
		reported[plant{v.Check, v.Object}] = true
	}
	found := map[string]bool{}
	var missed []string
	for _, p := range plants {
		if reported[p] {
			found[p.check] = true
		} else {
			missed = append(missed, p.check+": "+p.object)
		}
	}
	for _, c := range []struct {
		what string
		got  bool
	}{{"a kept claim with a backend bucket", victim != nil}, {"a second kept claim", twice != nil},
		{"a third kept claim with a backend bucket", shared != nil},
		{"six kept accesses with keys, two of them without periodic rotation", lent != nil && rotated != nil &&
			stuck != nil}} {
		if !c.got {
			r.logf("self-check: no %s: fewer plants", c.what)
		}
	}
	r.logf("self-check: %d of %d planted violations found, by %d checks", len(plants)-len(missed), len(plants),
		len(found))
	if len(missed) > 0 {
		return found, fmt.Errorf("the audit missed %d of %d planted violations: %v; it reported %v", len(missed),
			len(plants), missed, violations)
	}
	return found, nil
}

// plantObjects plants what is wrong on the API's side: Secrets, grant records, Bucket objects
// and a claim that COSI would never leave so.
func (r *run) plantObjects(ctx context.Context, want func(check, object string), twice, shared *claimRecord,
	lent *accessRecord,
) error {
	if err := r.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plantedNamespace}}); err != nil {
		return err
	}
	ghost := types.UID("00000000-0000-0000-0000-00000000dead")
	secrets := []*corev1.Secret{
		// Of no access.
		{ObjectMeta: metav1.ObjectMeta{Name: "planted", Namespace: plantedNamespace,
			Labels: map[string]string{cosiapi.LabelBucketAccessUID: string(ghost)}}},
		// Of a deleted access, its label removed (a tenant may): COSI's finalizer and annotations
		// still say whose it is.
		{ObjectMeta: metav1.ObjectMeta{Name: "planted-unlabeled", Namespace: plantedNamespace,
			Finalizers:  []string{cosiapi.FinalizerProtection},
			Annotations: map[string]string{cosiapi.AnnotationBucketAccessReference: plantedNamespace + "/planted-deleted"}}},
		// Being deleted, held by COSI's finalizer that no sidecar will remove.
		{ObjectMeta: metav1.ObjectMeta{Name: "planted-held", Namespace: plantedNamespace,
			Finalizers: []string{cosiapi.FinalizerProtection},
			Labels:     map[string]string{cosiapi.LabelBucketAccessUID: string(ghost)}}},
	}
	want(CheckStraySecret, "Secret "+plantedNamespace+"/planted")
	want(CheckStraySecret, "Secret "+plantedNamespace+"/planted-unlabeled")
	want(CheckTerminating, "Secret "+plantedNamespace+"/planted-held")
	if lent != nil {
		// Labeled with a kept access's UID, in another namespace: not that access's Secret.
		secrets = append(secrets, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "planted-lent",
			Namespace: plantedNamespace, Labels: map[string]string{cosiapi.LabelBucketAccessUID: string(lent.uid)}}})
		want(CheckStraySecret, "Secret "+plantedNamespace+"/planted-lent")
	}
	for _, o := range secrets {
		if err := r.create(ctx, o); err != nil {
			return err
		}
	}
	if err := r.del(ctx, secrets[2]); err != nil {
		return err
	}

	// Grant records of no access: in the sidecar's namespace, in another one, and in the
	// annotations of a Bucket, where earlier versions kept them.
	for _, ns := range []string{grantNamespace, plantedNamespace} {
		name := grantRecordPrefix + string(ghost)
		if err := r.create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns,
			Labels: map[string]string{cosiapi.LabelGrantDriver: r.driverName}}}); err != nil {
			return err
		}
		want(CheckStrayGrant, "ConfigMap "+ns+"/"+name)
	}
	// A Bucket object of the Delete policy whose claim is gone, released but not deleted (no driver
	// serves it, and the Controller does not delete a Bucket it marked released), carrying a
	// legacy grant record.
	left := objects.Bucket("planted-left", plantedDriver, cosiapi.DeletionPolicyDelete,
		objects.BucketProtocols(cosiapi.ProtocolS3),
		objects.ClaimedBy(plantedNamespace, "planted-gone", "00000000-0000-0000-0000-00000000d0e5"))
	left.Annotations = map[string]string{cosiapi.AnnotationBucketClaimBeingDeleted: "true",
		legacyGrantAnnotationPrefix + string(ghost): `{"uid":"` + string(ghost) + `","accountID":"ba-` + string(ghost) +
			`","bucketIDs":["planted-left"]}`}
	if err := r.create(ctx, left); err != nil {
		return err
	}
	want(CheckLeftBucket, "Bucket planted-left")
	want(CheckStrayGrant, "Bucket planted-left")
	// A Bucket of another driver naming planted-foreign.
	foreign := objects.Bucket("planted-foreign", plantedDriver, cosiapi.DeletionPolicyRetain,
		objects.BucketProtocols(cosiapi.ProtocolS3), objects.ClaimedBy(plantedNamespace, "planted-none", ""))
	if err := r.create(ctx, foreign); err != nil {
		return err
	}
	if err := r.setBucketID(ctx, foreign, "planted-foreign"); err != nil {
		return err
	}
	// A second Bucket bound to a kept claim.
	if twice != nil {
		second := objects.Bucket("planted-second", plantedDriver, cosiapi.DeletionPolicyRetain,
			objects.BucketProtocols(cosiapi.ProtocolS3), objects.ClaimedBy(twice.namespace, twice.plan.name, twice.uid))
		if err := r.create(ctx, second); err != nil {
			return err
		}
		want(CheckBucketsOfClaim, "BucketClaim "+twice.namespace+"/"+twice.plan.name)
	}
	// A kept claim's backend bucket imported again by an admin, into a Bucket of the same
	// driver: deleting either would delete the other's data.
	if shared != nil {
		imported := objects.Bucket("planted-shared", r.driverName, cosiapi.DeletionPolicyRetain,
			objects.BucketProtocols(cosiapi.ProtocolS3), objects.ClaimedBy(plantedNamespace, "planted-none", ""))
		imported.Spec.ExistingBucketID = shared.bucketID
		if err := r.create(ctx, imported); err != nil {
			return err
		}
		if err := r.setBucketID(ctx, imported, shared.bucketID); err != nil {
			return err
		}
		want(CheckSharedBucket, "backend bucket "+shared.bucketID)
	}
	stuck := objects.BucketClaim(plantedNamespace, "planted-stuck", "chaos-delete", objects.S3)
	stuck.Finalizers = []string{plantFinalizer}
	if err := r.create(ctx, stuck); err != nil {
		return err
	}
	if err := r.del(ctx, stuck); err != nil {
		return err
	}
	want(CheckTerminating, "BucketClaim "+plantedNamespace+"/planted-stuck")
	return nil
}

// setBucketID writes a Bucket's status.bucketID, as its driver's sidecar would.
func (r *run) setBucketID(ctx context.Context, b *cosiapi.Bucket, id string) error {
	p := client.RawPatch(types.MergePatchType, []byte(`{"status":{"bucketID":"`+id+`"}}`))
	return retry(ctx, "setting the bucket ID of "+b.Name, func(ctx context.Context) error {
		return r.client.Status().Patch(ctx, b, p)
	})
}

// grantRequest is the DriverGrantBucketAccess request the sidecar sends for a provisioned access
// (KEY authentication, the S3 protocol: the workload's), without COSI's own parameters, which the
// sidecar keeps from the driver (the rotation period).
func grantRequest(a *cosiapi.BucketAccess) *cosiproto.DriverGrantBucketAccessRequest {
	params := maps.Clone(a.Status.Parameters)
	maps.DeleteFunc(params, func(k, _ string) bool { return strings.HasPrefix(k, cosiapi.GroupName+"/") })
	req := &cosiproto.DriverGrantBucketAccessRequest{AccountId: a.Status.AccountID,
		Protocol: cosiproto.ObjectProtocol_S3, AuthenticationType: cosiproto.AuthenticationType_KEY,
		Parameters: params}
	mode := func(m cosiapi.BucketAccessMode) cosiproto.AccessMode_Mode {
		switch m {
		case cosiapi.BucketAccessModeReadWrite:
			return cosiproto.AccessMode_READ_WRITE
		case cosiapi.BucketAccessModeReadOnly:
			return cosiproto.AccessMode_READ_ONLY
		case cosiapi.BucketAccessModeWriteOnly:
			return cosiproto.AccessMode_WRITE_ONLY
		}
		return cosiproto.AccessMode_UNSPECIFIED
	}
	for _, c := range a.Spec.BucketClaims {
		for _, ab := range a.Status.AccessedBuckets {
			if ab.BucketClaimName == string(c.BucketClaimName) {
				req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: ab.BucketID,
					AccessModes: &cosiproto.AccessModes{ObjectData: mode(c.AccessModes.ObjectData),
						ObjectMetadata: mode(c.AccessModes.ObjectMetadata), BucketMetadata: mode(c.AccessModes.BucketMetadata)}})
			}
		}
	}
	return req
}

// plantRotated rotates the access's credentials through the driver, as the sidecar does, and
// writes the new key into its Secrets, but never retires the key it replaced.
func (r *run) plantRotated(ctx context.Context, d *driverclient.Client, a *accessRecord) error {
	live := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: a.namespace, Name: a.plan.name}}
	if err := r.get(ctx, live); err != nil {
		return err
	}
	var secrets []*corev1.Secret
	for _, c := range live.Spec.BucketClaims {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.namespace, Name: c.AccessSecretName}}
		if err := r.get(ctx, s); err != nil {
			return err
		}
		secrets = append(secrets, s)
	}
	if len(secrets) == 0 {
		return fmt.Errorf("planting a rotation: BucketAccess %s/%s has no Secrets", a.namespace, a.plan.name)
	}
	grant := grantRequest(live)
	resp, err := d.DriverRotateBucketAccessCredentials(ctx, &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: grant.AccountId, Buckets: grant.Buckets, Protocol: grant.Protocol,
		AuthenticationType: grant.AuthenticationType, Parameters: grant.Parameters,
		CredentialId: secrets[0].Annotations[cosiapi.AnnotationCredentialID],
	})
	if err != nil {
		return fmt.Errorf("planting a rotation: %w", err)
	}
	for _, s := range secrets {
		s.Data[cosiapi.SecretKeyS3AccessKeyID] = []byte(resp.GetCredentials().GetS3().GetAccessKeyId())
		s.Data[cosiapi.SecretKeyS3SecretAccessKey] = []byte(resp.GetCredentials().GetS3().GetAccessSecretKey())
		s.Annotations[cosiapi.AnnotationCredentialID] = resp.GetCredentialId()
		if err := retry(ctx, "writing Secret "+s.Name, func(ctx context.Context) error {
			return r.client.Update(ctx, s)
		}); err != nil {
			return fmt.Errorf("planting a rotation: %w", err)
		}
	}
	return nil
}

// plantStuckRotation writes into the access's grant record a rotation whose Secrets were written
// and whose retirement is a year away: the sidecar waits for it, and nothing finishes it.
func (r *run) plantStuckRotation(ctx context.Context, a *accessRecord) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: grantNamespace,
		Name: grantRecordPrefix + string(a.uid)}}
	for {
		if err := r.get(ctx, cm); err != nil {
			return fmt.Errorf("planting a stuck rotation: %w", err)
		}
		var g map[string]any
		if err := json.Unmarshal([]byte(cm.Data[grantDataKey]), &g); err != nil {
			return fmt.Errorf("planting a stuck rotation: the grant record of %s/%s: %w", a.namespace, a.plan.name, err)
		}
		from, _ := g["credentialID"].(string)
		g["rotation"] = map[string]any{"from": from, "to": "planted-to",
			"written": metav1.NewTime(time.Now().Add(365 * 24 * time.Hour)).UTC().Format(time.RFC3339)}
		data, err := json.Marshal(g)
		if err != nil {
			return err
		}
		cm.Data[grantDataKey] = string(data)
		err = retry(ctx, "writing ConfigMap "+cm.Name, func(ctx context.Context) error { return r.client.Update(ctx, cm) })
		if !apierrors.IsConflict(err) {
			return err
		}
	}
}
