package memory

import (
	"crypto/subtle"
	"maps"
	"slices"
	"time"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Category is one of the three kinds of data KEP-1979 separates access modes for.
type Category int

// The categories, in KEP-1979's order.
const (
	// ObjectData is reading and writing objects (get, put, list, delete).
	ObjectData Category = iota
	// ObjectMetadata is reading and writing objects' metadata (tags, ACLs).
	ObjectMetadata
	// BucketMetadata is reading and writing the bucket's own metadata (tags, versioning).
	BucketMetadata
)

// Backend answers questions about the driver's storage directly, not through the driver protocol:
// what a test (or cosi-sanity's backend probe) would ask a real object store.
type Backend struct{ d *Driver }

// Backend returns the driver's backend view.
func (d *Driver) Backend() Backend { return Backend{d} }

// BucketExists reports whether the bucket exists.
func (b Backend) BucketExists(bucketID string) bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	_, ok := b.d.state.Buckets[bucketID]
	return ok
}

// Buckets returns the IDs of all buckets, sorted.
func (b Backend) Buckets() []string {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return slices.Sorted(maps.Keys(b.d.state.Buckets))
}

// Accounts returns the IDs of all accounts, sorted.
func (b Backend) Accounts() []string {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	return slices.Sorted(maps.Keys(b.d.state.Accounts))
}

// AccountBuckets returns the IDs of the buckets an account was granted, sorted; nil when the account
// does not exist.
func (b Backend) AccountBuckets(accountID string) []string {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	a, ok := b.d.state.Accounts[accountID]
	if !ok {
		return nil
	}
	return slices.Sorted(maps.Keys(a.Buckets))
}

// AccountKeys returns the credentials that open the account, newest first: its key, the previous
// one that NewKeyPerGrant keeps valid, then the keys that rotations replaced and that were not
// retired yet; nil when the account does not exist.
func (b Backend) AccountKeys(accountID string) []*cosiproto.CredentialInfo {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	a, ok := b.d.state.Accounts[accountID]
	if !ok {
		return nil
	}
	var keys []*cosiproto.CredentialInfo
	for _, k := range a.keys() {
		keys = append(keys, a.keyCredentials(accountID, k))
	}
	return keys
}

// CredentialID returns the credential_id that the driver names the key creds by (in the answers
// of DriverGrantBucketAccess and DriverRotateBucketAccessCredentials), whether it still works or
// not.
func (Backend) CredentialID(creds *cosiproto.CredentialInfo) string {
	return credentialID(creds.GetS3().GetAccessSecretKey())
}

// Allowed reports whether creds open bucketID for reading (write false) or writing (write true)
// data of the category: the credentials must belong to a live account that was granted the
// bucket with a mode allowing it. Unrequested categories are denied: least privilege.
func (b Backend) Allowed(creds *cosiproto.CredentialInfo, bucketID string, category Category, write bool) bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	_, acct, k := b.accountOf(creds)
	return acct != nil && !acct.keyExpired(k, time.Now()) && b.allows(acct, bucketID, category, write)
}

// AllowedServiceAccount is Allowed for a workload that runs as the Kubernetes ServiceAccount
// namespace/name: an account granted with ServiceAccount authentication maps it to the backend.
func (b Backend) AllowedServiceAccount(namespace, name, bucketID string, category Category, write bool) bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	for _, acct := range b.d.state.Accounts {
		if acct.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT &&
			acct.ServiceAccount == namespace+"/"+name && b.allows(acct, bucketID, category, write) {
			return true
		}
	}
	return false
}

// Put writes an object named key into the bucket with creds, as a workload would, when they
// allow writing its object data, and reports whether they did. The object holds nothing: the
// driver keeps names only.
func (b Backend) Put(creds *cosiproto.CredentialInfo, bucketID, key string) bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	_, acct, k := b.accountOf(creds)
	if acct == nil || acct.keyExpired(k, time.Now()) || !b.allows(acct, bucketID, ObjectData, true) {
		return false
	}
	b.putLocked(bucketID, key)
	return true
}

// PutServiceAccount is Put for a workload that runs as the Kubernetes ServiceAccount
// namespace/name.
func (b Backend) PutServiceAccount(namespace, name, bucketID, key string) bool {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	for _, acct := range b.d.state.Accounts {
		if acct.AuthenticationType == cosiproto.AuthenticationType_SERVICE_ACCOUNT &&
			acct.ServiceAccount == namespace+"/"+name && b.allows(acct, bucketID, ObjectData, true) {
			b.putLocked(bucketID, key)
			return true
		}
	}
	return false
}

func (b Backend) putLocked(bucketID, key string) {
	bk := b.d.state.Buckets[bucketID]
	if !slices.Contains(bk.Objects, key) {
		bk.Objects = append(bk.Objects, key)
		slices.Sort(bk.Objects)
	}
}

// Objects returns the names of the bucket's objects, sorted; nil for a missing bucket.
func (b Backend) Objects(bucketID string) []string {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if bk, ok := b.d.state.Buckets[bucketID]; ok {
		return slices.Clone(bk.Objects)
	}
	return nil
}

// Empty deletes every object of the bucket, as the backend's administrator would.
func (b Backend) Empty(bucketID string) {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	if bk, ok := b.d.state.Buckets[bucketID]; ok {
		bk.Objects = nil
	}
}

// AccountOf returns the ID of the account that creds authenticate as, or "" when they
// authenticate as none (never issued, or revoked).
func (b Backend) AccountOf(creds *cosiproto.CredentialInfo) string {
	b.d.mu.Lock()
	defer b.d.mu.Unlock()
	id, _, _ := b.accountOf(creds)
	return id
}

// accountOf finds the live account that holds creds as one of its keys.
func (b Backend) accountOf(creds *cosiproto.CredentialInfo) (string, *account, key) {
	for id, acct := range b.d.state.Accounts {
		for _, k := range acct.keys() {
			if sameCredentials(acct.keyCredentials(id, k), creds) {
				return id, acct, k
			}
		}
	}
	return "", nil, key{}
}

func (b Backend) allows(acct *account, bucketID string, category Category, write bool) bool {
	m, ok := acct.Buckets[bucketID]
	if !ok || !b.bucketExists(bucketID) {
		return false
	}
	mode := [...]cosiproto.AccessMode_Mode{m.ObjectData, m.ObjectMetadata, m.BucketMetadata}[category]
	switch mode {
	case cosiproto.AccessMode_READ_WRITE:
		return true
	case cosiproto.AccessMode_READ_ONLY:
		return !write
	case cosiproto.AccessMode_WRITE_ONLY:
		return write
	}
	return false
}

func (b Backend) bucketExists(id string) bool {
	_, ok := b.d.state.Buckets[id]
	return ok
}

func sameCredentials(a, b *cosiproto.CredentialInfo) bool {
	eq := func(x, y string) bool { return x != "" && subtle.ConstantTimeCompare([]byte(x), []byte(y)) == 1 }
	switch {
	case a.GetS3() != nil:
		return eq(a.GetS3().GetAccessKeyId(), b.GetS3().GetAccessKeyId()) &&
			eq(a.GetS3().GetAccessSecretKey(), b.GetS3().GetAccessSecretKey())
	case a.GetAzure() != nil:
		return eq(a.GetAzure().GetAccessToken(), b.GetAzure().GetAccessToken())
	case a.GetGcs() != nil:
		return eq(a.GetGcs().GetHmacAccessId(), b.GetGcs().GetHmacAccessId()) &&
			eq(a.GetGcs().GetHmacSecret(), b.GetGcs().GetHmacSecret())
	}
	return false
}
