package s3

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// KeyRotation is implemented by account back-ends whose identities can hold a second key:
// credential rotation (DriverRotateBucketAccessCredentials). A key's credential_id is its access
// key ID.
type KeyRotation interface {
	// Rotate creates a key for the existing identity accountID next to the key keep, which keeps
	// working, and returns it. Keys other than keep are deleted first (a repeated call's key, which
	// COSI has not handed out, or the older key a grant kept). NotFound when the identity or keep
	// does not exist.
	Rotate(ctx context.Context, accountID, keep string) (Key, error)
	// Retire deletes the key of accountID; a missing identity or key is retired already.
	// FailedPrecondition when it is the identity's only key.
	Retire(ctx context.Context, accountID, key string) error
}

// DriverRotateBucketAccessCredentials issues a second key for the access's identity; the key
// credential_id keeps working until it is retired. Back-ends without KeyRotation answer
// Unimplemented.
func (d *Driver) DriverRotateBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (_ *cosiproto.DriverRotateBucketAccessCredentialsResponse, err error) {
	defer d.logFailure("DriverRotateBucketAccessCredentials", &err)
	rot, ok := d.cfg.Accounts.(KeyRotation)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this account back-end cannot rotate keys")
	}
	if req.GetAuthenticationType() == cosiproto.AuthenticationType_SERVICE_ACCOUNT {
		return nil, status.Error(codes.InvalidArgument,
			"a ServiceAccount access has no key to rotate: its workloads get short-lived credentials themselves")
	}
	if _, err := d.checkAccess(req); err != nil {
		return nil, err
	}
	id := req.GetAccountId()
	if !validAccountName(id) {
		return nil, status.Errorf(codes.NotFound, "account %q does not exist (not a valid user name)", id)
	}
	resp := &cosiproto.DriverRotateBucketAccessCredentialsResponse{}
	for _, b := range req.GetBuckets() {
		if err := checkBucketID(b.GetBucketId()); err != nil {
			return nil, err
		}
		region, err := d.bucketRegion(ctx, b.GetBucketId())
		if err != nil || region == "" {
			region = d.cfg.Region
		}
		resp.Buckets = append(resp.Buckets, &cosiproto.DriverGrantBucketAccessResponse_BucketInfo{
			BucketId: b.GetBucketId(), BucketInfo: d.bucketInfo(b.GetBucketId(), region),
		})
	}
	unlock := d.locks.Lock("account/" + id)
	defer unlock()
	key, err := rot.Rotate(ctx, id, req.GetCredentialId())
	if err != nil {
		return nil, err
	}
	resp.Credentials = &cosiproto.CredentialInfo{
		S3: &cosiproto.S3Credentials{AccessKeyId: key.AccessKeyID, AccessSecretKey: key.SecretAccessKey},
	}
	resp.CredentialId = key.AccessKeyID
	return resp, nil
}

// DriverRetireBucketAccessCredentials deletes one key of the access's identity.
func (d *Driver) DriverRetireBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (_ *cosiproto.DriverRetireBucketAccessCredentialsResponse, err error) {
	defer d.logFailure("DriverRetireBucketAccessCredentials", &err)
	rot, ok := d.cfg.Accounts.(KeyRotation)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this account back-end cannot rotate keys")
	}
	id := req.GetAccountId()
	if !validAccountName(id) {
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil // never created
	}
	unlock := d.locks.Lock("account/" + id)
	defer unlock()
	if err := rot.Retire(ctx, id, req.GetCredentialId()); err != nil {
		return nil, err
	}
	return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
}

var _ KeyRotation = (*IAMAccounts)(nil)

// Rotate implements KeyRotation: IAM allows two keys per user, so every key but keep is deleted
// before the new one is created.
func (a *IAMAccounts) Rotate(ctx context.Context, id, keep string) (Key, error) {
	if err := a.checkOurs(ctx, id); err != nil {
		return Key{}, err
	}
	keys, err := a.keys(ctx, id)
	if err != nil {
		return Key{}, err
	}
	if !slices.Contains(keys, keep) {
		return Key{}, status.Errorf(codes.NotFound, "IAM user %q has no access key %q", id, keep)
	}
	for _, k := range keys {
		if k != keep {
			if err := a.deleteKey(ctx, id, k); err != nil {
				return Key{}, err
			}
		}
	}
	return a.createKey(ctx, id)
}

// Retire implements KeyRotation.
func (a *IAMAccounts) Retire(ctx context.Context, id, key string) error {
	if err := a.checkOurs(ctx, id); err != nil {
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if status.Code(err) == codes.AlreadyExists {
			return status.Errorf(codes.FailedPrecondition, "not retiring: %v", status.Convert(err).Message())
		}
		return err
	}
	keys, err := a.keys(ctx, id)
	if err != nil || !slices.Contains(keys, key) {
		return err
	}
	if len(keys) == 1 {
		return status.Errorf(codes.FailedPrecondition,
			"access key %q is the only one of IAM user %q: revoke the access instead", key, id)
	}
	return a.deleteKey(ctx, id, key)
}

var _ KeyRotation = (*RGWAccounts)(nil)

// rgwRotatedKeyID is the access key ID of the key that rotating key from of RGW user id creates.
// It is derived, not random: a repeated rotation finds the key that the first one created and
// returns it (RGW returns a user's secret keys to the admin), and a grant tells the newest key of
// a user from the one it replaces. Key IDs are not secret, and the secret key is RGW's random one.
func rgwRotatedKeyID(id, from string) string {
	sum := sha256.Sum256([]byte("cosi-rotated-key\x00" + id + "\x00" + from))
	return base32.StdEncoding.EncodeToString(sum[:])[:20]
}

// Rotate implements KeyRotation: the user gets the key rgwRotatedKeyID(id, keep), or keeps it
// when a previous call created it, so a repeated call returns the same key. Other keys but keep
// are deleted first (a key that a rotation before should have retired).
func (a *RGWAccounts) Rotate(ctx context.Context, id, keep string) (Key, error) {
	u, err := a.getUser(ctx, id)
	if err != nil {
		return Key{}, err
	}
	if u == nil {
		return Key{}, status.Errorf(codes.NotFound, "RGW user %q does not exist", id)
	}
	if u.DisplayName != rgwDisplayPrefix+id {
		return Key{}, status.Errorf(codes.AlreadyExists, "RGW user %q exists and was not created by this driver", id)
	}
	keys := u.ownKeys(id)
	if !slices.ContainsFunc(keys, func(k Key) bool { return k.AccessKeyID == keep }) {
		return Key{}, status.Errorf(codes.NotFound, "RGW user %q has no access key %q", id, keep)
	}
	next := rgwRotatedKeyID(id, keep)
	var issued Key
	for _, k := range keys {
		switch k.AccessKeyID {
		case keep:
		case next:
			issued = k
		default:
			if err := a.deleteKey(ctx, id, k.AccessKeyID); err != nil {
				return Key{}, err
			}
		}
	}
	if issued.AccessKeyID != "" {
		return issued, nil
	}
	created := &rgwUser{}
	err = a.admin(ctx, http.MethodPut, "user", url.Values{"key": {""}, "uid": {id}, "key-type": {"s3"},
		"access-key": {next}, "generate-key": {"true"}}, &created.Keys)
	if err != nil {
		return Key{}, rgwStatus(err, fmt.Sprintf("creating access key %q for RGW user %q", next, id))
	}
	for _, k := range created.ownKeys(id) {
		if k.AccessKeyID == next && k.SecretAccessKey != "" {
			return k, nil
		}
	}
	// A non-conformant store. Retrying finds the key, if it was created.
	return Key{}, status.Errorf(codes.Internal,
		"creating access key %q for RGW user %q: the store answered without the key", next, id)
}

// Retire implements KeyRotation.
func (a *RGWAccounts) Retire(ctx context.Context, id, key string) error {
	u, err := a.getUser(ctx, id)
	if err != nil || u == nil {
		return err
	}
	if u.DisplayName != rgwDisplayPrefix+id {
		return status.Errorf(codes.FailedPrecondition, "not retiring: RGW user %q was not created by this driver", id)
	}
	keys := u.ownKeys(id)
	if !slices.ContainsFunc(keys, func(k Key) bool { return k.AccessKeyID == key }) {
		return nil
	}
	if len(keys) == 1 {
		return status.Errorf(codes.FailedPrecondition,
			"access key %q is the only one of RGW user %q: revoke the access instead", key, id)
	}
	return a.deleteKey(ctx, id, key)
}

// deleteKey deletes an S3 key of RGW user id; a key that is gone is deleted.
func (a *RGWAccounts) deleteKey(ctx context.Context, id, key string) error {
	err := a.admin(ctx, http.MethodDelete, "user", url.Values{"key": {""}, "uid": {id}, "key-type": {"s3"},
		"access-key": {key}}, nil)
	if e := (*rgwError)(nil); err != nil && (!errors.As(err, &e) || e.Status != http.StatusNotFound) {
		return rgwStatus(err, fmt.Sprintf("deleting access key %q of RGW user %q", key, id))
	}
	return nil
}
