package memory

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Credential rotation: DriverRotateBucketAccessCredentials issues a key and makes it the
// account's current key (the one DriverGrantBucketAccess returns again); the key it rotated from
// keeps working until DriverRetireBucketAccessCredentials revokes it, and the account's other
// keys are revoked at once.

// credentialID names a key without revealing it: a hash of the random secret.
func credentialID(secret string) string {
	sum := sha256.Sum256([]byte("cosi-memory-credential/" + secret))
	return "mem-" + hex.EncodeToString(sum[:8])
}

// current is the account's current key.
func (a *account) current() key { return key{ID: a.KeyID, Secret: a.Secret, Issued: a.issued()} }

// issued is when the account's current key was issued.
func (a *account) issued() time.Time {
	if a.Renewed.After(a.Created) {
		return a.Renewed
	}
	return a.Created
}

// keys returns every key of the account that works, the current one first.
func (a *account) keys() []key {
	out := []key{a.current()}
	if a.Previous != "" {
		out = append(out, key{ID: a.KeyID, Secret: a.Previous, Issued: a.issued()})
	}
	return append(out, a.Older...)
}

// key returns the working key with the credential ID.
func (a *account) key(id string) (key, bool) {
	for _, k := range a.keys() {
		if credentialID(k.Secret) == id {
			return k, true
		}
	}
	return key{}, false
}

// clone is a deep copy, to undo a change that could not be saved.
func (a *account) clone() *account {
	c := *a
	c.Older = slices.Clone(a.Older)
	c.Rotations = maps.Clone(a.Rotations)
	return &c
}

// DriverRotateBucketAccessCredentials issues a new key for the account and makes it current; the
// key it replaces keeps working, and every other key of the account is revoked (as the S3 driver
// does on IAM). A repeated call for the same key returns the same new key while that one works.
func (d *Driver) DriverRotateBucketAccessCredentials(
	_ context.Context,
	req *cosiproto.DriverRotateBucketAccessCredentialsRequest,
) (*cosiproto.DriverRotateBucketAccessCredentialsResponse, error) {
	if d.cfg.RenewByGrant {
		return nil, status.Error(codes.Unimplemented, "this driver cannot rotate credentials (RenewByGrant)")
	}
	if req.GetAccountId() == "" || req.GetCredentialId() == "" {
		return nil, status.Error(codes.InvalidArgument, "account_id and credential_id are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id := req.GetAccountId()
	acct, ok := d.state.Accounts[id]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "account %q does not exist", id)
	}
	if acct.AuthenticationType != cosiproto.AuthenticationType_KEY {
		return nil, status.Errorf(codes.InvalidArgument, "account %q authenticates without a key: nothing to rotate", id)
	}
	from := req.GetCredentialId()
	issued, done := acct.Rotations[from]
	k, live := acct.key(issued)
	if !done || !live {
		if _, ok := acct.key(from); !ok {
			return nil, status.Errorf(codes.NotFound, "credential %q of account %q does not exist", from, id)
		}
		undo := acct.clone()
		kept, _ := acct.key(from)
		k = key{Secret: rand.Text()}
		sum := sha256.Sum256([]byte(id + "/" + k.Secret))
		k.ID = "MEM" + strings.ToUpper(hex.EncodeToString(sum[:8]))
		// Every key but from goes, as on IAM: a key a grant minted and nobody got (its answer
		// lost), or that a repeated call issued, would otherwise outlive every rotation.
		acct.Older, acct.Previous = []key{kept}, ""
		acct.Secret, acct.KeyID, acct.Renewed = k.Secret, k.ID, time.Now()
		k.Issued = acct.Renewed
		if acct.Rotations == nil {
			acct.Rotations = map[string]string{}
		}
		acct.Rotations[from] = credentialID(k.Secret)
		if err := d.save(); err != nil {
			d.state.Accounts[id] = undo
			return nil, err
		}
	}
	return &cosiproto.DriverRotateBucketAccessCredentialsResponse{
		Buckets:              d.grantedBuckets(req.GetBuckets(), acct.Protocol),
		CertificateAuthority: d.cfg.CertificateAuthority,
		Credentials:          acct.keyCredentials(id, k),
		CredentialId:         credentialID(k.Secret),
	}, nil
}

// DriverRetireBucketAccessCredentials revokes one key of the account. A key or account that does
// not exist is already retired; the account's only key is never retired.
func (d *Driver) DriverRetireBucketAccessCredentials(
	_ context.Context,
	req *cosiproto.DriverRetireBucketAccessCredentialsRequest,
) (*cosiproto.DriverRetireBucketAccessCredentialsResponse, error) {
	if d.cfg.RenewByGrant {
		return nil, status.Error(codes.Unimplemented, "this driver cannot rotate credentials (RenewByGrant)")
	}
	if req.GetAccountId() == "" || req.GetCredentialId() == "" {
		return nil, status.Error(codes.InvalidArgument, "account_id and credential_id are required")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, cred := req.GetAccountId(), req.GetCredentialId()
	acct, ok := d.state.Accounts[id]
	if !ok {
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
	}
	if _, ok := acct.key(cred); !ok {
		return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
	}
	if len(acct.keys()) == 1 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"credential %q is the only one of account %q: revoke the access instead", cred, id)
	}
	undo := acct.clone()
	switch {
	case credentialID(acct.Secret) == cred && acct.Previous != "":
		acct.Secret, acct.Previous = acct.Previous, ""
	case credentialID(acct.Secret) == cred:
		// The newest older key becomes current.
		k := acct.Older[len(acct.Older)-1]
		acct.Older = acct.Older[:len(acct.Older)-1]
		acct.Secret, acct.KeyID, acct.Renewed = k.Secret, k.ID, k.Issued
	case credentialID(acct.Previous) == cred:
		acct.Previous = ""
	default:
		acct.Older = slices.DeleteFunc(acct.Older, func(k key) bool { return credentialID(k.Secret) == cred })
	}
	delete(acct.Rotations, cred)
	if err := d.save(); err != nil {
		d.state.Accounts[id] = undo
		return nil, err
	}
	return &cosiproto.DriverRetireBucketAccessCredentialsResponse{}, nil
}
