package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/index"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Grant records make revocation independent of what anyone can do to a BucketAccess or its
// Buckets. A tenant can remove the access's finalizer and delete it in the same instant: the
// object, and with it the account ID the revocation needs, is gone before any controller can put
// the finalizer back; an admin can delete a Bucket with its finalizer, or replace it. So before
// asking the driver for credentials, the sidecar records the grant in a ConfigMap of its own
// namespace (the grant namespace), one per access, named after the access's UID. Tenants cannot
// write there, nor can Bucket admins: only COSI and the admins of COSI's namespace, who can read
// the sidecar's token anyway. One ConfigMap per access has no limit on the accesses of a Bucket
// (an annotation on the Bucket had: 256 KiB for all of them).
//
// A record is removed once its grant is revoked: by the access's own deletion, or, when the access
// vanished without it, by the GrantReconciler (record_orphans.go), at start-up and whenever an
// access goes.

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;update;patch;delete,namespace=cosi-system

// grantRecordPrefix prefixes the name of a grant record; the access's UID follows.
const grantRecordPrefix = "cosi-grant-"

// grantDataKey is the ConfigMap key that holds the record.
const grantDataKey = "grant.json"

// legacyGrantAnnotationPrefix prefixed the annotations that recorded grants on Buckets before
// grant records moved to ConfigMaps. The sidecar migrates them (migrateLegacyGrants), verifying
// each with the driver: whoever may write Buckets could have written them.
const legacyGrantAnnotationPrefix = cosiapi.GroupName + "/grant-"

// grantRecord is what revoking an access needs once the BucketAccess is gone, and where the
// access's credentials are in their life (access.go reads it to decide the access's steps):
//
//	no record                     not granted (or by a version that kept none: unrecordedGrant)
//	AccountID, no CredentialID    recorded before phase 2; the Secrets not written yet
//	CredentialID                  granted: the Secrets hold that credential
//	Rotation.From                 rotating: the driver is asked for a new credential
//	Rotation.To                   issued: the Secrets are being written with it
//	Rotation.Written              in every Secret: From is retired after the grace period
//	Expiry, ExpiryFrom            the Secrets' credentials expire: renewed at four fifths
//
// The record is removed last, once the grant is revoked.
type grantRecord struct {
	Namespace          string            `json:"namespace"`
	Name               string            `json:"name"`
	UID                types.UID         `json:"uid"`
	AccountID          string            `json:"accountID"`
	Protocol           cosiapi.Protocol  `json:"protocol"`
	AuthenticationType string            `json:"authenticationType"`
	ServiceAccountName string            `json:"serviceAccountName,omitempty"`
	Parameters         map[string]string `json:"parameters,omitempty"`
	BucketIDs          []string          `json:"bucketIDs"`
	// Modes are the access modes granted on each of BucketIDs, in the same order: the phase 1
	// request that verifies the account carries them.
	Modes []cosiapi.BucketAccessModes `json:"modes,omitempty"`
	// BucketNames are the Bucket objects of the grant: a Bucket waits for the grants recorded
	// for it before it is deleted, and revoke failures are reported on it.
	BucketNames []string `json:"bucketNames,omitempty"`
	// SecretNames are the access's Secrets, in Namespace: deleted with the grant when the access
	// vanished without its cleanup.
	SecretNames []string `json:"secretNames,omitempty"`
	// BucketInfo is the status.bucketInfo of each of BucketNames that the Secrets were written
	// against (access_refresh.go): when a Bucket's changes, the Secret values that came from it follow.
	BucketInfo map[string]map[string]string `json:"bucketInfo,omitempty"`
	// KeptInfo are, by Bucket name, the values of an earlier BucketInfo that a later one lacked,
	// which the Secrets kept (access_refresh.go): the Secrets were written against them too.
	KeptInfo map[string]map[string]string `json:"keptInfo,omitempty"`
	// The credential the Secrets hold, and the rotation in progress (access_rotate.go). Kept when a
	// grant writes the record again.
	rotationState
}

// newGrantRecord is the record of a grant of the access with parameters for the driver, on the
// Buckets whose IDs its status holds.
func newGrantRecord(ba *cosiapi.BucketAccess, parameters map[string]string) grantRecord {
	rec := grantRecord{
		Namespace: ba.Namespace, Name: ba.Name, UID: ba.UID, AccountID: ba.Status.AccountID,
		Protocol: ba.Spec.Protocol, AuthenticationType: string(ba.Status.AuthenticationType),
		Parameters: parameters, SecretNames: secretNames(ba),
	}
	if ba.Status.AuthenticationType == cosiapi.AuthenticationTypeServiceAccount {
		rec.ServiceAccountName = ba.Spec.ServiceAccountName
	}
	for _, b := range ba.Status.AccessedBuckets {
		if b.BucketID != "" {
			rec.BucketIDs = append(rec.BucketIDs, b.BucketID)
			rec.Modes = append(rec.Modes, claimModes(ba, b.BucketClaimName))
		}
		rec.BucketNames = append(rec.BucketNames, b.BucketName)
	}
	return rec
}

// infoWritten is the information of Bucket name that the Secrets were written against: its
// recorded information, and the values an earlier one had that it lacks (KeptInfo).
func (g *grantRecord) infoWritten(name string) map[string]string {
	if len(g.KeptInfo[name]) == 0 {
		return g.BucketInfo[name]
	}
	out := maps.Clone(g.KeptInfo[name])
	maps.Copy(out, g.BucketInfo[name])
	return out
}

// grantRecordFor is the record of a grant of the access on its Buckets (by claim name), with the
// Buckets' information that its Secrets are written against, and parameters for the driver.
func grantRecordFor(
	ba *cosiapi.BucketAccess, buckets map[string]*cosiapi.Bucket, parameters map[string]string,
) grantRecord {
	rec := newGrantRecord(ba, parameters)
	for _, b := range buckets {
		if len(b.Status.BucketInfo) > 0 {
			if rec.BucketInfo == nil {
				rec.BucketInfo = map[string]map[string]string{}
			}
			rec.BucketInfo[b.Name] = b.Status.BucketInfo
		}
	}
	return rec
}

// claimModes are the access modes the access asks for on a claim.
func claimModes(ba *cosiapi.BucketAccess, claim string) cosiapi.BucketAccessModes {
	for _, c := range ba.Spec.BucketClaims {
		if c.BucketClaimName == claim {
			return c.AccessModes
		}
	}
	return cosiapi.BucketAccessModes{}
}

// revokeRequest is the driver request that revokes the recorded grant.
func (g grantRecord) revokeRequest() *cosiproto.DriverRevokeBucketAccessRequest {
	req := &cosiproto.DriverRevokeBucketAccessRequest{
		AccountId: g.AccountID, Protocol: rpcProtocol(g.Protocol),
		AuthenticationType: rpcAuthenticationType(cosiapi.AuthenticationType(g.AuthenticationType)), Parameters: g.Parameters,
	}
	if req.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		req.ServiceAccount = &cosiproto.ServiceAccount{Namespace: g.Namespace, Name: g.ServiceAccountName}
	}
	for _, id := range g.BucketIDs {
		req.Buckets = append(req.Buckets, &cosiproto.DriverRevokeBucketAccessRequest_Bucket{BucketId: id})
	}
	return req
}

// generateRequest is the phase 1 request of the recorded grant's account: the driver answers it
// with the account ID it generates for the access (KEP-1979: the same ID for the same name), which
// is how a record that COSI did not write itself is verified.
func (g grantRecord) generateRequest() *cosiproto.DriverGenerateBucketAccessIdRequest {
	req := &cosiproto.DriverGenerateBucketAccessIdRequest{
		AccountName: cosiapi.AccountNamePrefix + string(g.UID), Protocol: rpcProtocol(g.Protocol),
		AuthenticationType: rpcAuthenticationType(cosiapi.AuthenticationType(g.AuthenticationType)),
		Parameters:         g.Parameters,
	}
	if req.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		req.ServiceAccount = &cosiproto.ServiceAccount{Namespace: g.Namespace, Name: g.ServiceAccountName}
	}
	for i, id := range g.BucketIDs {
		// Records of earlier versions have no modes: read-only object data, the least a driver
		// accepts, names the same account.
		modes := cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}
		if i < len(g.Modes) {
			modes = g.Modes[i]
		}
		req.Buckets = append(req.Buckets, &cosiproto.AccessedBucket{BucketId: id, AccessModes: rpcAccessModes(modes)})
	}
	return req
}

// grantStore keeps the grant records of one driver: ConfigMaps in the grant namespace, labeled
// with the driver. Reads that decide a revocation are uncached (reader); the cache (client) serves
// the index of records by Bucket.
type grantStore struct {
	client    client.Client
	reader    client.Reader
	namespace string
	// driver is the value of LabelGrantDriver for this driver's records.
	driver string
}

// grantDriverLabel is the LabelGrantDriver value of a driver: its name when that is a valid label
// value (driver names are domain names of 63 characters or less), else a hash of it.
func grantDriverLabel(driverName string) string {
	if len(validation.IsValidLabelValue(driverName)) == 0 {
		return driverName
	}
	sum := sha256.Sum256([]byte(driverName))
	return "sha256-" + hex.EncodeToString(sum[:16])
}

func grantRecordName(uid types.UID) string { return grantRecordPrefix + string(uid) }

// grantRecordUID is the access UID of a record's ConfigMap name, or "".
func grantRecordUID(name string) types.UID {
	uid, _ := strings.CutPrefix(name, grantRecordPrefix)
	if uid == name {
		return ""
	}
	return types.UID(uid)
}

// parseGrantRecord reads the record of a ConfigMap of the store.
func parseGrantRecord(cm *corev1.ConfigMap) (grantRecord, error) {
	var g grantRecord
	if _, ok := cm.Data[cachedGrantKey]; ok {
		return g, fmt.Errorf("grant record %s/%s: the cache's copy holds only what is read from the cache",
			cm.Namespace, cm.Name)
	}
	if err := json.Unmarshal([]byte(cm.Data[grantDataKey]), &g); err != nil {
		return g, fmt.Errorf("grant record %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	if g.UID != grantRecordUID(cm.Name) {
		return g, fmt.Errorf("grant record %s/%s names access UID %s", cm.Namespace, cm.Name, g.UID)
	}
	return g, nil
}

// GrantsByBucket indexes the grant records by the names of their Buckets.
var GrantsByBucket = index.Field{Object: &corev1.ConfigMap{}, Name: "grant.bucketNames", InNamespace: true,
	HashBuckets: index.OwnValueBuckets,
	Extract: func(o client.Object) []string {
		g, err := cachedGrantOf(o.(*corev1.ConfigMap))
		if err != nil {
			return nil
		}
		return g.BucketNames
	}}

// put writes the record, before the driver is asked. It is written on every grant, never skipped
// because a cached copy shows it: the copy may predate a revocation that removed it. The create
// answers, uncached, whether the record exists; an existing one is updated only if it differs.
// It returns the record as the API server has it after the write (or the read), and whether it
// existed before.
func (s grantStore) put(ctx context.Context, g grantRecord) (*corev1.ConfigMap, bool, error) {
	value, err := json.Marshal(g)
	if err != nil {
		return nil, false, err
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: grantRecordName(g.UID), Namespace: s.namespace,
			Labels: map[string]string{cosiapi.LabelGrantDriver: s.driver},
		},
		Data: map[string]string{grantDataKey: string(value)},
	}
	err = s.client.Create(ctx, cm)
	if !apierrors.IsAlreadyExists(err) {
		return cm, false, err
	}
	existing := &corev1.ConfigMap{}
	if err := s.reader.Get(ctx, client.ObjectKeyFromObject(cm), existing); err != nil {
		return nil, true, err
	}
	if have, err := parseGrantRecord(existing); err == nil && existing.Labels[cosiapi.LabelGrantDriver] == s.driver {
		g.rotationState = have.rotationState
		if value, err = json.Marshal(g); err != nil {
			return nil, true, err
		}
		cm.Data[grantDataKey] = string(value)
	}
	if existing.Data[grantDataKey] == string(value) && existing.Labels[cosiapi.LabelGrantDriver] == s.driver {
		return existing, true, nil
	}
	// Another driver's record of the same access is that driver's to revoke with: never
	// overwritten (sidecars of several drivers may share a namespace).
	if owner := existing.Labels[cosiapi.LabelGrantDriver]; owner != "" && owner != s.driver {
		return nil, true, fmt.Errorf("grant record %s/%s belongs to driver %q, not %q", s.namespace, cm.Name, owner, s.driver)
	}
	existing.Labels = cm.Labels
	existing.Data = cm.Data
	return existing, true, s.client.Update(ctx, existing) // locked to the version read
}

// update writes g over the record cm that get returned, locked to the version read: a record
// that changed meanwhile is read again by the retry, never overwritten.
func (s grantStore) update(ctx context.Context, cm *corev1.ConfigMap, g grantRecord) error {
	value, err := json.Marshal(g)
	if err != nil {
		return err
	}
	if cm.Data[grantDataKey] == string(value) {
		return nil
	}
	if cm.Data == nil {
		cm.Data = map[string]string{}
	}
	cm.Data[grantDataKey] = string(value)
	return s.client.Update(ctx, cm)
}

// recordCredential records the credential that a grant wrote into the Secrets of the access at
// now, and when it expires (nil: it does not), on written, the record as put returned it before
// the grant, locked to its version: a record that changed since (a rotation, an admin) is read
// again, uncached, and updated on that copy. Nothing is written when the record says it already.
func (s grantStore) recordCredential(
	ctx context.Context, written *corev1.ConfigMap, credentialID string, now metav1.Time, expiry *metav1.Time,
) error {
	if g, err := parseGrantRecord(written); err == nil {
		if !g.holdCredential(credentialID, now, expiry) {
			return nil
		}
		if err := s.update(ctx, written, g); !apierrors.IsConflict(err) {
			return err
		}
	}
	g, cm, err := s.get(ctx, grantRecordUID(written.Name))
	if err != nil || g == nil || !g.holdCredential(credentialID, now, expiry) {
		return err
	}
	return s.update(ctx, cm, *g)
}

// holdCredential records that the Secrets hold credentialID, written at now and expiring at
// expiry, and reports whether that changed the record. A new credential starts the rotation
// period; credentials that expire start their lifetime at each grant that wrote them (a
// repeated grant may move the expiry, as the Azure driver's does).
func (g *grantRecord) holdCredential(credentialID string, now metav1.Time, expiry *metav1.Time) bool {
	changed := false
	if g.CredentialID != credentialID {
		g.CredentialID, g.PeriodFrom = credentialID, ptr.To(now)
		changed = true
	}
	switch {
	case expiry != nil:
		g.Expiry, g.ExpiryFrom = expiry, ptr.To(now)
		changed = true
	case g.Expiry != nil || g.ExpiryFrom != nil:
		g.Expiry, g.ExpiryFrom = nil, nil
		changed = true
	}
	return changed
}

// get returns the record of the access, read uncached, or nil.
func (s grantStore) get(ctx context.Context, uid types.UID) (*grantRecord, *corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := s.reader.Get(ctx, types.NamespacedName{Namespace: s.namespace, Name: grantRecordName(uid)}, cm)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if cm.Labels[cosiapi.LabelGrantDriver] != s.driver {
		return nil, nil, nil // another driver's: not this sidecar's to revoke
	}
	g, err := parseGrantRecord(cm)
	if err != nil {
		return nil, nil, err
	}
	return &g, cm, nil
}

// remove deletes a record once its grant is revoked, locked to the version that was read, so that
// a record rewritten meanwhile (a new grant) survives.
func (s grantStore) remove(ctx context.Context, cm *corev1.ConfigMap) error {
	err := s.client.Delete(ctx, cm, client.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion})
	return client.IgnoreNotFound(err)
}

// forBucket returns what the cache holds of the records of the grants on a Bucket, by access UID.
func (s grantStore) forBucket(ctx context.Context, bucketName string) (map[types.UID]cachedGrant, error) {
	var list corev1.ConfigMapList
	if err := GrantsByBucket.List(ctx, s.client, &list, s.namespace, bucketName,
		client.MatchingLabels{cosiapi.LabelGrantDriver: s.driver}); err != nil {
		return nil, err
	}
	out := map[types.UID]cachedGrant{}
	for i := range list.Items {
		if g, err := cachedGrantOf(&list.Items[i]); err == nil {
			out[g.UID] = g
		}
	}
	return out, nil
}

func secretNames(ba *cosiapi.BucketAccess) []string {
	names := make([]string, 0, len(ba.Spec.BucketClaims))
	for _, c := range ba.Spec.BucketClaims {
		names = append(names, c.AccessSecretName)
	}
	return names
}
