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

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
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
	var p planter = planterV1alpha2{d}
	if r.v1alpha1() {
		p1, err := r.newPlanterV1alpha1()
		if err != nil {
			return nil, err
		}
		defer p1.close()
		p = p1
	}
	var plants []plant
	want := func(check, object string) { plants = append(plants, plant{check, object}) }
	s3 := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	// A backend bucket and an account (with a key) that nothing accounts for.
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "planted-orphan",
		Protocols: s3}); err != nil {
		return nil, err
	}
	want(CheckOrphanBucket, "backend bucket planted-orphan")
	creds, err := p.grant(ctx, "planted-account", "planted-orphan", false)
	if err != nil {
		return nil, err
	}
	// With a v1alpha1 driver that names its accounts itself, an account that no access explains is
	// a leak that the sidecar must have reported on its bucket: none reports planted-orphan's.
	orphanAccount := func(id string) {
		if r.v1alpha1() {
			want(CheckUnreportedLeak, "backend bucket planted-orphan")
			return
		}
		want(CheckOrphanAccount, "backend account "+id)
	}
	orphanAccount("planted-account")
	// That key, as if a deleted access had held it: it must be refused.
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-deleted"},
		uid: "planted-deleted-uid", keys: []seenKey{{secret: "planted", bucketID: "planted-orphan",
			creds: creds}}})
	want(CheckLiveKey, "BucketAccess "+plantedNamespace+"/planted-deleted")
	if err := r.plantFlakyRefusal(ctx, p, orphanAccount, want); err != nil {
		return nil, err
	}
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
	// The kept accesses with keys, each used by one plant, taken in the order of the slots. The
	// rotation plants take only an access that does not rotate periodically: a rotation that
	// starts before the audit would hide the planted one (the audit checks replaced keys once no
	// rotation runs). So does the late grant's key: a periodic rotation revokes every key but the
	// one it rotates from, and would take the planted key away before the audit saw it. Any
	// access does for the others.
	var cut, minted, widened, lent, rotated, stuck, stale, retired, lost, corrupt, ahead, never, third,
		covered *accessRecord
	type slot struct {
		a        **accessRecord
		periodic bool // a periodic access will do
	}
	slots := []slot{{&rotated, false}, {&stuck, false}, {&cut, true}, {&minted, false}, {&widened, true},
		{&lent, true}, {&stale, false}, {&retired, false}, {&lost, false}, {&corrupt, false}, {&ahead, false},
		{&never, false}, {&third, false}}
	if r.v1alpha1() {
		// No rotation plants (a v1alpha1 driver cannot rotate); a reported leak instead.
		slots = []slot{{&stuck, false}, {&cut, true}, {&minted, false}, {&widened, true}, {&lent, true},
			{&corrupt, false}, {&never, false}, {&third, false}, {&covered, true}}
	}
	fill := func(accesses []*accessRecord) (empty int) {
		for _, a := range accesses {
			if !a.plan.keep || a.accountID == "" || len(a.keys) == 0 || slices.ContainsFunc(a.keys, func(k seenKey) bool {
				return victim != nil && k.bucketID == victim.bucketID
			}) {
				continue
			}
			for _, s := range slots {
				if *s.a == nil && (s.periodic || !a.plan.periodic) {
					*s.a = a
					break
				}
			}
		}
		for _, s := range slots {
			if *s.a == nil {
				empty++
			}
		}
		return empty
	}
	empty := fill(r.ledger.accesses)
	var host *claimRecord
	for _, c := range r.ledger.claims {
		if c.plan.keep && c.uid != "" && c.bucketID != "" && c != victim && c.namespace != plantedNamespace &&
			(host == nil || host == twice || host == shared) {
			host = c
		}
	}
	r.ledger.mu.Unlock()
	// A run that kept fewer accesses than the plants take gets accesses of the self-check's own,
	// to a kept claim: COSI provisions them, after convergence.
	if empty > 0 && host != nil {
		more, err := r.plantVictims(ctx, host, empty)
		if err != nil {
			return nil, err
		}
		r.ledger.mu.Lock()
		fill(more)
		r.ledger.mu.Unlock()
	}
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
		var buckets []string
		for _, k := range cut.keys {
			buckets = append(buckets, k.bucketID)
		}
		accounts, err := r.plantAccounts(ctx, cut)
		if err != nil {
			return nil, err
		}
		for _, account := range accounts {
			if err := p.revoke(ctx, account, buckets); err != nil {
				return nil, err
			}
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
		if r.v1alpha1() {
			account, err := r.plantAccount(ctx, minted)
			if err != nil {
				return nil, err
			}
			if _, err := p.grant(ctx, account, live.Status.AccessedBuckets[0].BucketID, false); err != nil {
				return nil, err
			}
		} else if _, err := d.DriverGrantBucketAccess(ctx, grantRequest(live)); err != nil {
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
		account, err := r.plantAccount(ctx, widened)
		if err != nil {
			return nil, err
		}
		if err := r.backend.widen(ctx, d, live, account, "planted-orphan"); err != nil {
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
	if err := r.plantRotations(ctx, d, want, stale, retired, lost, corrupt, ahead, never, third); err != nil {
		return nil, err
	}
	coveredAccount := ""
	if r.v1alpha1() {
		if coveredAccount, err = r.plantLeaks(ctx, p, want, covered); err != nil {
			return nil, err
		}
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
	// A leak the sidecar reported is not a violation: the planted report covers the planted account.
	if coveredAccount != "" {
		if !r.reportedAsLeak(coveredAccount) {
			missed = append(missed, ReportedLeaksTitle+": account "+coveredAccount)
		} else {
			found[ReportedLeaksTitle] = true
		}
	}
	for _, c := range []struct {
		what string
		got  bool
	}{{"a kept claim with a backend bucket", victim != nil}, {"a second kept claim", twice != nil},
		{"a third kept claim with a backend bucket", shared != nil},
		{"kept accesses with keys for every plant", third != nil && lent != nil && (covered != nil || !r.v1alpha1())}} {
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

// plantVictims creates n BucketAccesses to the claim, of the class without periodic rotation, and
// waits until COSI provisioned them (or provisionPatience passed).
func (r *run) plantVictims(ctx context.Context, host *claimRecord, n int) ([]*accessRecord, error) {
	var out []*accessRecord
	for i := range n {
		name := fmt.Sprintf("planted-victim-%d", i)
		a := objects.BucketAccess(host.namespace, name, "chaos")
		objects.Grant(host.plan.name, name+"-"+host.plan.name, objects.ReadWrite)(a)
		if err := r.create(ctx, a); err != nil {
			return nil, err
		}
		rec := &accessRecord{namespace: host.namespace, plan: accessPlan{name: name, keep: true}, uid: a.UID,
			claims: []*claimRecord{host}}
		r.ledger.addAccess(rec)
		r.timeline.addf(rec.subjects(), "self-check: created access %s/%s", host.namespace, name)
		out = append(out, rec)
	}
	if err := r.waitProvisioned(ctx, host.namespace, nil, out); err != nil {
		return nil, err
	}
	return out, r.observe(ctx, host.namespace, nil, out)
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
	secrets, _, resp, err := r.rotateBehind(ctx, d, a)
	if err != nil {
		return err
	}
	return r.writeRotated(ctx, secrets, resp, true)
}

// rotateBehind rotates the access's credentials through the driver, as the sidecar does, from
// the credential its first Secret names; it returns the access's Secrets, its grant request and
// the driver's answer.
func (r *run) rotateBehind(ctx context.Context, d *driverclient.Client, a *accessRecord) (
	[]*corev1.Secret, *cosiproto.DriverGrantBucketAccessRequest, *cosiproto.DriverRotateBucketAccessCredentialsResponse,
	error,
) {
	live := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Namespace: a.namespace, Name: a.plan.name}}
	if err := r.get(ctx, live); err != nil {
		return nil, nil, nil, err
	}
	var secrets []*corev1.Secret
	for _, c := range live.Spec.BucketClaims {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: a.namespace, Name: c.AccessSecretName}}
		if err := r.get(ctx, s); err != nil {
			return nil, nil, nil, err
		}
		secrets = append(secrets, s)
	}
	if len(secrets) == 0 {
		return nil, nil, nil, fmt.Errorf("planting a rotation: BucketAccess %s/%s has no Secrets", a.namespace, a.plan.name)
	}
	grant := grantRequest(live)
	resp, err := d.DriverRotateBucketAccessCredentials(ctx, &cosiproto.DriverRotateBucketAccessCredentialsRequest{
		AccountId: grant.AccountId, Buckets: grant.Buckets, Protocol: grant.Protocol,
		AuthenticationType: grant.AuthenticationType, Parameters: grant.Parameters,
		CredentialId: secrets[0].Annotations[cosiapi.AnnotationCredentialID],
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("planting a rotation: %w", err)
	}
	return secrets, grant, resp, nil
}

// writeRotated writes the rotation's new key into the Secrets, and its credential ID into their
// annotation if annotate.
func (r *run) writeRotated(
	ctx context.Context, secrets []*corev1.Secret, resp *cosiproto.DriverRotateBucketAccessCredentialsResponse,
	annotate bool,
) error {
	for _, s := range secrets {
		s.Data[cosiapi.SecretKeyS3AccessKeyID] = []byte(resp.GetCredentials().GetS3().GetAccessKeyId())
		s.Data[cosiapi.SecretKeyS3SecretAccessKey] = []byte(resp.GetCredentials().GetS3().GetAccessSecretKey())
		if annotate {
			s.Annotations[cosiapi.AnnotationCredentialID] = resp.GetCredentialId()
		}
		if err := retry(ctx, "writing Secret "+s.Name, func(ctx context.Context) error {
			return r.client.Update(ctx, s)
		}); err != nil {
			return fmt.Errorf("planting a rotation: %w", err)
		}
	}
	return nil
}

// plantRotations plants the leaks of a rotation that went wrong behind the audit's back
// ("Attack on the audit", the rotation's): each access given is one victim, and may be nil.
func (r *run) plantRotations(
	ctx context.Context, d *driverclient.Client, want func(check, object string),
	stale, retired, lost, corrupt, ahead, never, third *accessRecord,
) error {
	name := func(a *accessRecord) string { return "BucketAccess " + a.namespace + "/" + a.plan.name }
	// Rotated, the Secrets written with the new key but their credential-id annotation left naming
	// the key it replaced, which is never retired.
	if stale != nil {
		secrets, _, resp, err := r.rotateBehind(ctx, d, stale)
		if err != nil {
			return err
		}
		if err := r.writeRotated(ctx, secrets, resp, false); err != nil {
			return err
		}
		want(CheckRotatedKey, name(stale))
	}
	// Rotated, the Secrets written, the key it replaced retired, and the grant record still naming
	// that key: the record's last write lost. The next rotation would rotate from a retired key.
	if retired != nil {
		secrets, grant, resp, err := r.rotateBehind(ctx, d, retired)
		if err != nil {
			return err
		}
		from := secrets[0].Annotations[cosiapi.AnnotationCredentialID]
		if err := r.writeRotated(ctx, secrets, resp, true); err != nil {
			return err
		}
		if _, err := d.DriverRetireBucketAccessCredentials(ctx, &cosiproto.DriverRetireBucketAccessCredentialsRequest{
			AccountId: grant.AccountId, CredentialId: from, Protocol: grant.Protocol, Parameters: grant.Parameters,
		}); err != nil {
			return fmt.Errorf("planting a retired credential: %w", err)
		}
		want(CheckGrantRecord, name(retired))
	}
	// Rotated twice in a row, the first rotation's key written into the Secrets and the record,
	// the second's answer lost: the driver issued a key that no Secret holds and no record names,
	// in the same second as the Secrets' key (IAM dates keys to the second).
	if lost != nil {
		secrets, _, resp, err := r.rotateBehind(ctx, d, lost)
		if err != nil {
			return err
		}
		if err := r.writeRotated(ctx, secrets, resp, true); err != nil {
			return err
		}
		if _, _, _, err := r.rotateBehind(ctx, d, lost); err != nil {
			return err
		}
		if err := r.recordCredential(ctx, lost, resp.GetCredentialId()); err != nil {
			return err
		}
		want(CheckStrayKey, name(lost))
	}
	// A grant record holding a rotation whose Secrets were written at a moment that cannot be read:
	// neither the sidecar nor the audit can read the record.
	if corrupt != nil {
		if err := r.editRecord(ctx, corrupt, func(g map[string]any) {
			g["rotation"] = map[string]any{"from": g["credentialID"], "to": "planted-to", "written": "soon"}
		}); err != nil {
			return err
		}
		want(CheckGrantRecord, name(corrupt))
	}
	// Rotated, the grant record naming the new key, the Secrets still holding the one it replaced,
	// never retired: the Secrets' write lost, the record's done.
	if ahead != nil {
		_, _, resp, err := r.rotateBehind(ctx, d, ahead)
		if err != nil {
			return err
		}
		if err := r.recordCredential(ctx, ahead, resp.GetCredentialId()); err != nil {
			return err
		}
		want(CheckStrayKey, name(ahead))
	}
	// A grant record naming a credential that the driver never issued.
	if never != nil {
		if err := r.recordCredential(ctx, never, "planted-never-issued"); err != nil {
			return err
		}
		want(CheckGrantRecord, name(never))
	}
	// A third key: on IAM, created by the admin (the IAM service may refuse it: AWS and Versity
	// allow two keys per user); the memory driver's, by a rotation and a grant whose answers were
	// lost.
	if third != nil {
		planted, err := r.thirdKey(ctx, d, third)
		if err != nil {
			return err
		}
		if planted {
			want(CheckStrayKey, name(third))
		}
	}
	return nil
}

// thirdKey gives the access's account a third key; planted is false when the store refuses even
// a second one. On IAM the admin creates them (the IAM service refuses a third: AWS and Versity
// allow two keys per user; the second is planted then); the memory driver's come from a rotation
// and a grant whose answers were lost.
func (r *run) thirdKey(ctx context.Context, d *driverclient.Client, a *accessRecord) (planted bool, _ error) {
	if s3b, ok := r.backend.(*s3Backend); ok {
		account, err := r.plantAccount(ctx, a)
		if err != nil {
			return false, err
		}
		// A second later than the Secrets' key: IAM dates keys to the second, and the journal
		// does not know the admin's keys.
		sleep(ctx, time.Second)
		for i := range 2 {
			_, err := s3b.iamAdmin.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(account)})
			if err != nil {
				r.logf("self-check: IAM user %s refuses key %d: %v", account, i+2, err)
				return i > 0, nil
			}
		}
		return true, nil
	}
	_, grant, _, err := r.rotateBehind(ctx, d, a)
	if err != nil {
		return false, err
	}
	if _, err := d.DriverGrantBucketAccess(ctx, grant); err != nil {
		return false, err
	}
	return true, nil
}

// recordCredential has the access's grant record name the credential, as the sidecar records the
// one it wrote into the Secrets.
func (r *run) recordCredential(ctx context.Context, a *accessRecord, id string) error {
	return r.editRecord(ctx, a, func(g map[string]any) { g["credentialID"] = id })
}

// editRecord changes the access's grant record, behind the sidecar's back.
func (r *run) editRecord(ctx context.Context, a *accessRecord, edit func(g map[string]any)) error {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: grantNamespace,
		Name: grantRecordPrefix + string(a.uid)}}
	for {
		if err := r.get(ctx, cm); err != nil {
			return fmt.Errorf("planting in a grant record: %w", err)
		}
		var g map[string]any
		if err := json.Unmarshal([]byte(cm.Data[grantDataKey]), &g); err != nil {
			return fmt.Errorf("planting in the grant record of %s/%s: %w", a.namespace, a.plan.name, err)
		}
		edit(g)
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

// plantFlakyRefusal (S3) plants an account's key as a deleted access's, and has the next S3
// request that tries it answered with a 500, as a restarting gateway would; then it audits once,
// so that the audit the self-check checks is the second to try the key.
func (r *run) plantFlakyRefusal(
	ctx context.Context, p planter, orphanAccount func(id string), want func(check, object string),
) error {
	s3b, ok := r.backend.(*s3Backend)
	if !ok {
		return nil // the memory backend answers from the driver's state
	}
	creds, err := p.grant(ctx, "planted-flaky", "planted-orphan", true)
	if err != nil {
		return err
	}
	orphanAccount("planted-flaky")
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-flaky"},
		uid: "planted-flaky-uid", keys: []seenKey{{secret: "planted-flaky", bucketID: "planted-orphan",
			creds: creds}}})
	s3b.failNext(creds.GetS3().GetAccessKeyId())
	if _, err := r.audit(ctx); err != nil {
		return err
	}
	want(CheckLiveKey, "BucketAccess "+plantedNamespace+"/planted-flaky")
	return nil
}

// plantStuckRotation writes into the access's grant record a rotation whose Secrets were written
// and whose retirement is a year away: the sidecar waits for it, and nothing finishes it.
func (r *run) plantStuckRotation(ctx context.Context, a *accessRecord) error {
	return r.editRecord(ctx, a, func(g map[string]any) {
		from, _ := g["credentialID"].(string)
		g["rotation"] = map[string]any{"from": from, "to": "planted-to",
			"written": metav1.NewTime(time.Now().Add(365 * 24 * time.Hour)).UTC().Format(time.RFC3339)}
	})
}
