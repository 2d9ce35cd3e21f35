package chaos

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/objects"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// plantedNamespace holds what the self-check plants in the API.
const plantedNamespace = "chaos-planted"

// plantedDriver is the driver of the planted Bucket objects: none serves it.
const plantedDriver = "planted.chaos.cosi.io"

// plantFinalizer holds the planted claim in Terminating.
const plantFinalizer = "chaos.cosi.kube-cosi.io/hold"

// selfCheck plants one instance of each kind of violation once the run converged, behind COSI's
// back, as a broken component or a careless admin would, and audits again: each must be found,
// or the audit could miss what it exists to find. It returns the checks that found their plant.
func (r *run) selfCheck(ctx context.Context) (map[string]bool, error) {
	d, err := r.driverClient(ctx)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	s3 := []cosiproto.ObjectProtocol_Type{cosiproto.ObjectProtocol_S3}
	// A backend bucket and an account (with a key) that nothing accounts for.
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "planted-orphan",
		Protocols: s3}); err != nil {
		return nil, err
	}
	grant, err := d.DriverGrantBucketAccess(ctx, &cosiproto.DriverGrantBucketAccessRequest{
		AccountId: "planted-account", Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY,
		Buckets: []*cosiproto.AccessedBucket{{BucketId: "planted-orphan",
			AccessModes: &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_WRITE}}},
	})
	if err != nil {
		return nil, err
	}
	// That key, as if a deleted access had held it: it must be refused.
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-deleted"},
		uid: "planted-deleted-uid", keys: []seenKey{{secret: "planted", bucketID: "planted-orphan",
			creds: grant.GetCredentials()}}})
	// A kept claim's bucket deleted in the backend.
	var victim *claimRecord
	r.ledger.mu.Lock()
	for _, c := range r.ledger.claims {
		if c.plan.keep && !c.plan.static && c.bucketID != "" {
			victim = c
			break
		}
	}
	r.ledger.mu.Unlock()
	if victim != nil {
		if _, err := d.DriverDeleteBucket(ctx, &cosiproto.DriverDeleteBucketRequest{BucketId: victim.bucketID}); err != nil {
			return nil, err
		}
	}
	// A kept access's key revoked behind COSI's back (one that does not reach the victim's bucket,
	// whose keys fail with it).
	var cut *accessRecord
	r.ledger.mu.Lock()
	for _, a := range r.ledger.accesses {
		if a.plan.keep && a.accountID != "" && len(a.keys) > 0 && !slices.ContainsFunc(a.keys, func(k seenKey) bool {
			return victim != nil && k.bucketID == victim.bucketID
		}) {
			cut = a
			break
		}
	}
	r.ledger.mu.Unlock()
	if cut != nil {
		req := &cosiproto.DriverRevokeBucketAccessRequest{AccountId: cut.accountID, Protocol: cosiproto.ObjectProtocol_S3,
			AuthenticationType: cosiproto.AuthenticationType_KEY}
		for _, k := range cut.keys {
			req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: k.bucketID})
		}
		if _, err := d.DriverRevokeBucketAccess(ctx, req); err != nil {
			return nil, err
		}
	}
	// A kept claim and a kept access that vanished (in the ledger only: the audit must notice that
	// what it was told to keep is gone).
	r.ledger.addClaim(&claimRecord{namespace: plantedNamespace, plan: claimPlan{name: "planted-kept", keep: true},
		uid: "planted-kept-claim-uid"})
	r.ledger.addAccess(&accessRecord{namespace: plantedNamespace, plan: accessPlan{name: "planted-kept", keep: true},
		uid: "planted-kept-access-uid"})

	// A Secret and a grant record without their access, a claim stuck Terminating.
	if err := r.create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: plantedNamespace}}); err != nil {
		return nil, err
	}
	ghost := types.UID("00000000-0000-0000-0000-00000000dead")
	for _, o := range []*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "planted", Namespace: plantedNamespace,
		Labels: map[string]string{cosiapi.LabelBucketAccessUID: string(ghost)}}}} {
		if err := r.create(ctx, o); err != nil {
			return nil, err
		}
	}
	if err := r.create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: grantRecordPrefix + string(ghost),
		Namespace: grantNamespace, Labels: map[string]string{cosiapi.LabelGrantDriver: r.driverName}}}); err != nil {
		return nil, err
	}
	// A Bucket object of the Delete policy whose claim is gone, released but not deleted (no driver
	// serves it, and the Controller does not delete a Bucket it marked released), and a second Bucket
	// bound to a kept claim.
	left := objects.Bucket("planted-left", plantedDriver, cosiapi.DeletionPolicyDelete,
		objects.BucketProtocols(cosiapi.ProtocolS3),
		objects.ClaimedBy(plantedNamespace, "planted-gone", "00000000-0000-0000-0000-00000000d0e5"))
	left.Annotations = map[string]string{cosiapi.AnnotationBucketClaimBeingDeleted: "true"}
	if err := r.create(ctx, left); err != nil {
		return nil, err
	}
	var twice *claimRecord
	r.ledger.mu.Lock()
	for _, c := range r.ledger.claims {
		if c.plan.keep && c.uid != "" && c != victim && c.namespace != plantedNamespace {
			twice = c
			break
		}
	}
	r.ledger.mu.Unlock()
	if twice != nil {
		second := objects.Bucket("planted-second", plantedDriver, cosiapi.DeletionPolicyRetain,
			objects.BucketProtocols(cosiapi.ProtocolS3), objects.ClaimedBy(twice.namespace, twice.plan.name, twice.uid))
		if err := r.create(ctx, second); err != nil {
			return nil, err
		}
	}
	stuck := objects.BucketClaim(plantedNamespace, "planted-stuck", "chaos-delete", objects.S3)
	stuck.Finalizers = []string{plantFinalizer}
	if err := r.create(ctx, stuck); err != nil {
		return nil, err
	}
	if err := r.del(ctx, stuck); err != nil {
		return nil, err
	}

	violations, err := r.audit(ctx)
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, v := range violations {
		switch {
		case v.Check == CheckOrphanBucket && v.Object == "backend bucket planted-orphan",
			v.Check == CheckOrphanAccount && v.Object == "backend account planted-account",
			v.Check == CheckLiveKey && v.Object == "BucketAccess "+plantedNamespace+"/planted-deleted",
			v.Check == CheckStraySecret && v.Object == "Secret "+plantedNamespace+"/planted",
			v.Check == CheckStrayGrant && v.Object == "ConfigMap "+grantNamespace+"/"+grantRecordPrefix+string(ghost),
			v.Check == CheckTerminating && v.Object == "BucketClaim "+plantedNamespace+"/planted-stuck",
			v.Check == CheckClaim && v.Object == "BucketClaim "+plantedNamespace+"/planted-kept",
			v.Check == CheckAccess && v.Object == "BucketAccess "+plantedNamespace+"/planted-kept",
			v.Check == CheckLeftBucket && v.Object == "Bucket planted-left",
			victim != nil && v.Check == CheckLostBucket && v.Object == "backend bucket "+victim.bucketID,
			cut != nil && v.Check == CheckLostKey && v.Object == "BucketAccess "+cut.namespace+"/"+cut.plan.name,
			twice != nil && v.Check == CheckBucketsOfClaim && v.Object == "BucketClaim "+twice.namespace+"/"+twice.plan.name:
			found[v.Check] = true
		}
	}
	want := 9
	for _, planted := range []bool{victim != nil, cut != nil, twice != nil} {
		if planted {
			want++
		}
	}
	r.logf("self-check: %d of %d planted violations found", len(found), want)
	if len(found) != want {
		return found, fmt.Errorf("the audit found %d of %d planted violations: %v; it reported %v", len(found), want,
			found, violations)
	}
	return found, nil
}
