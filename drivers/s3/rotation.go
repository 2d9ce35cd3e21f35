package s3

import (
	"context"
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
	if _, err := checkAccess(req.GetProtocol(), req.GetAuthenticationType(), req.GetParameters()); err != nil {
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
	unlock := d.locks.lock("account/" + id)
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
	unlock := d.locks.lock("account/" + id)
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
