package azure

import (
	"context"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// DriverRotateBucketAccessCredentials adds the access's next stored access policy next to the
// policy credential_id, which keeps working until it is retired, and returns a token bound to the
// new one, with a new expiry (ParamSASExpiry). The sidecar renews expiring tokens this way too.
// Repeating it before the retirement returns the same token. The access's other policies (a
// repeated call's whose answer was lost) are deleted: only credential_id is in a Secret.
func (d *Driver) DriverRotateBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (_ *cosiproto.DriverRotateBucketAccessCredentialsResponse, err error) {
	defer d.logFailure("DriverRotateBucketAccessCredentials", &err)
	params, perms, err := checkAccess(req.GetProtocol(), req.GetAuthenticationType(), req.GetParameters(),
		req.GetBuckets())
	if err != nil {
		return nil, err
	}
	id := req.GetAccountId()
	if err := checkAccountID(id); err != nil {
		return nil, err
	}
	if req.GetCredentialId() == "" {
		return nil, status.Error(codes.InvalidArgument, "credential_id is required")
	}
	bucket := req.GetBuckets()[0].GetBucketId()
	if err := checkContainerName(bucket); err != nil {
		return nil, err
	}
	cb, from, err := parseCredentialID(id, req.GetCredentialId())
	if err != nil {
		return nil, err
	}
	if cb != bucket {
		return nil, status.Errorf(codes.NotFound, "credential %q is not one of container %q", req.GetCredentialId(), bucket)
	}
	var issued *container.SignedIdentifier
	err = d.editPolicies(ctx, bucket, func(ids policySet) (policySet, bool, error) {
		now := time.Now()
		if ids.find(from) == nil {
			return nil, false, status.Errorf(codes.NotFound,
				"credential %q does not exist (its stored access policy is gone from container %q)", req.GetCredentialId(), bucket)
		}
		mine := ids.of(id)
		if last := mine[len(mine)-1]; *last.ID != from && newer(*last.ID, from) && !expired(last, now) &&
			samePermissions(deref(last.AccessPolicy.Permission), perms) {
			issued = last // issued before, its answer lost
		}
		kept := ids.without(func(p *container.SignedIdentifier) bool {
			return policyOwner(deref(p.ID)) == id && *p.ID != from && p != issued
		})
		if issued != nil {
			return kept, len(kept) != len(ids), nil
		}
		if err := kept.full(bucket, id, true); err != nil {
			return nil, false, err
		}
		issued = newPolicy(id, perms, params, now)
		return append(kept, issued), true, nil
	})
	if err != nil {
		return nil, err
	}
	a, err := d.answer(bucket, issued)
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverRotateBucketAccessCredentialsResponse{
		Buckets: a.Buckets, Credentials: a.Credentials, CredentialId: a.CredentialId,
	}, nil
}

// DriverRetireBucketAccessCredentials deletes the stored access policy credential_id of the
// access, which revokes the tokens bound to it; the access's other policies stay. A missing
// container or policy is retired already; the access's only policy is FailedPrecondition.
func (d *Driver) DriverRetireBucketAccessCredentials(
	ctx context.Context,
	req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (_ *cosiproto.DriverRetireBucketAccessCredentialsResponse, err error) {
	defer d.logFailure("DriverRetireBucketAccessCredentials", &err)
	id := req.GetAccountId()
	if id == "" || req.GetCredentialId() == "" {
		return nil, status.Error(codes.InvalidArgument, "account_id and credential_id are required")
	}
	bucket, pid, err := parseCredentialID(id, req.GetCredentialId())
	if err != nil {
		// Not a credential the driver issued to the account: nothing of it to retire.
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil //nolint:nilerr // idempotent
	}
	err = d.editPolicies(ctx, bucket, func(ids policySet) (policySet, bool, error) {
		if ids.find(pid) == nil {
			return ids, false, nil
		}
		if len(ids.of(id)) == 1 {
			return nil, false, status.Errorf(codes.FailedPrecondition,
				"credential %q is the access's only one: revoke the access instead", req.GetCredentialId())
		}
		return ids.without(func(p *container.SignedIdentifier) bool { return deref(p.ID) == pid }), true, nil
	})
	if status.Code(err) == codes.NotFound {
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
	}
	if err != nil {
		return nil, err
	}
	return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
}
