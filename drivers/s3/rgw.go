package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/kube-cosi/cosi/pkg/driver"
)

// rgwUnknownActions are actions of the access-mode table that Ceph RGW (16, Debian bookworm)
// rejects in bucket policies (InvalidArgument): it has no such operations, so leaving them out
// grants nothing less.
var rgwUnknownActions = map[string]bool{
	"s3:GetObjectAttributes": true, "s3:GetObjectVersionAttributes": true, "s3:GetEncryptionConfiguration": true,
}

// rgwDisplayPrefix starts the display name of every RGW user the driver creates; only those
// users are the driver's.
const rgwDisplayPrefix = "cosi-bucket-access:"

// RGWAccounts is the account back-end for Ceph RGW: one RGW user per BucketAccess, created with
// the Admin Ops API so that it cannot create buckets of its own (max-buckets -1), with one S3
// key, and one statement pair per bucket in each bucket's policy naming the user as principal.
// RGW returns a user's keys to the admin, so a repeated grant returns the same key.
type RGWAccounts struct {
	endpoint, adminPath, region string
	creds                       aws.CredentialsProvider
	http                        *http.Client
	s3                          *s3.Client
	signer                      *v4.Signer
	// locks serializes read-modify-write of each bucket's policy.
	locks driver.KeyedMutex
}

// NewRGWAccounts returns an RGW back-end using the Admin Ops API at endpoint+adminPath and
// s3Client (with the same admin credentials) for bucket policies.
func NewRGWAccounts(
	endpoint, adminPath, region string,
	creds aws.CredentialsProvider,
	httpClient *http.Client,
	s3Client *s3.Client,
) *RGWAccounts {
	if httpClient == nil {
		httpClient = http.DefaultClient
	}
	return &RGWAccounts{
		endpoint:  strings.TrimRight(endpoint, "/"),
		adminPath: "/" + strings.Trim(adminPath, "/"),
		region:    region,
		creds:     creds,
		http:      httpClient,
		s3:        s3Client,
		signer:    v4.NewSigner(),
	}
}

// ignorePublicACLsOnNewBuckets implements publicACLIgnorer: RGW 16 does not evaluate the
// conditions of rgwACLDenials for CopyObject and CreateMultipartUpload, so an objectData writer
// could still publish objects that way; IgnorePublicAcls makes such ACLs ineffective.
func (*RGWAccounts) ignorePublicACLsOnNewBuckets() bool { return true }

// objectLockHeadersUnchecked implements lockHeadersUnchecked: RGW 16 authorizes an upload with
// x-amz-object-lock-mode, -retain-until-date or -legal-hold as s3:PutObject alone, and no policy
// refuses the headers (neither a Deny of s3:PutObjectRetention nor a condition on
// s3:object-lock-mode or s3:x-amz-object-lock-mode, whose keys RGW does not set).
func (*RGWAccounts) objectLockHeadersUnchecked() bool { return true }

// rgwUser is the part of the Admin Ops user info the driver uses.
type rgwUser struct {
	UserID      string `json:"user_id"`
	DisplayName string `json:"display_name"`
	Keys        []struct {
		User      string `json:"user"`
		AccessKey string `json:"access_key"`
		SecretKey string `json:"secret_key"`
	} `json:"keys"`
}

// rgwError is an Admin Ops error response. Its message never holds a key: RGW answers errors
// with a code only.
type rgwError struct {
	Status int
	Code   string `json:"Code"`
}

func (e *rgwError) Error() string { return fmt.Sprintf("RGW admin API: HTTP %d %s", e.Status, e.Code) }

// admin calls the Admin Ops API. out, when set, receives the JSON response.
func (a *RGWAccounts) admin(ctx context.Context, method, resource string, query url.Values, out any) error {
	query.Set("format", "json")
	u := a.endpoint + a.adminPath + "/" + resource + "?" + query.Encode()
	req, err := http.NewRequestWithContext(ctx, method, u, nil)
	if err != nil {
		return err
	}
	creds, err := a.creds.Retrieve(ctx)
	if err != nil {
		return err
	}
	empty := sha256.Sum256(nil)
	payloadHash := hex.EncodeToString(empty[:])
	req.Header.Set("X-Amz-Content-Sha256", payloadHash)
	if err := a.signer.SignHTTP(ctx, creds, req, payloadHash, "s3", a.region, time.Now()); err != nil {
		return err
	}
	resp, err := a.http.Do(req)
	if err != nil {
		// The error names the URL, with the query: for the log only.
		return newBackendError(
			codes.Unavailable,
			err,
			fmt.Sprintf("RGW admin API %s %s: the object store could not be reached", method, resource),
		)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return newBackendError(
			codes.Unavailable,
			err,
			fmt.Sprintf("RGW admin API %s %s: reading the answer failed", method, resource),
		)
	}
	if resp.StatusCode >= 300 {
		e := &rgwError{Status: resp.StatusCode}
		_ = json.Unmarshal(body, e)
		return e
	}
	if out != nil && len(bytes.TrimSpace(body)) > 0 {
		if err := json.Unmarshal(body, out); err != nil {
			return status.Errorf(codes.Internal, "RGW admin API %s %s: decoding the response: %v", method, resource, err)
		}
	}
	return nil
}

// rgwStatus turns an Admin Ops error into a gRPC status.
func rgwStatus(err error, what string) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	var e *rgwError
	if !errors.As(err, &e) {
		return newBackendError(codes.Unavailable, err, what+": "+describe(err))
	}
	code, hint := codes.Internal, ""
	switch {
	case e.Status == http.StatusNotFound:
		code = codes.NotFound
	case e.Status == http.StatusConflict:
		code = codes.AlreadyExists
	case e.Status == http.StatusForbidden:
		// Every Admin Ops call is the driver's own: a 403 is its key or its caps refused, which
		// an admin fixes, so it is retried (see adminAuthCodes).
		code = codes.Unavailable
		hint = ": the object store refused the driver's own identity; " +
			"the driver's administrator must check its credentials and its caps (users=*; buckets=* for bucket quotas)"
	case e.Status == http.StatusBadRequest:
		code = codes.InvalidArgument
	case e.Status >= 500:
		code = codes.Unavailable
	}
	return newBackendError(code, err, what+": "+e.Error()+hint)
}

// ownKeys are the user's own S3 keys (not its subusers'), as the store lists them.
func (u *rgwUser) ownKeys(id string) []Key {
	var keys []Key
	for _, k := range u.Keys {
		if k.User == id || k.User == "" {
			keys = append(keys, Key{AccessKeyID: k.AccessKey, SecretAccessKey: k.SecretKey})
		}
	}
	return keys
}

// newestKey is the key of user id that a grant returns: during a rotation the key it issued,
// which no other key of the user was rotated to (rgwRotatedKeyID), so that a Secret written
// again in the grace period gets the key that stays; otherwise the first. Zero when there is none.
func (u *rgwUser) newestKey(id string) Key {
	keys := u.ownKeys(id)
	for _, k := range keys {
		next := rgwRotatedKeyID(id, k.AccessKeyID)
		if !slices.ContainsFunc(keys, func(o Key) bool { return o.AccessKeyID == next }) {
			return k
		}
	}
	if len(keys) == 0 {
		return Key{}
	}
	return keys[0]
}

func (a *RGWAccounts) getUser(ctx context.Context, id string) (*rgwUser, error) {
	var u rgwUser
	err := a.admin(ctx, http.MethodGet, "user", url.Values{"uid": {id}}, &u)
	if e := (*rgwError)(nil); errors.As(err, &e) && e.Status == http.StatusNotFound {
		return nil, nil
	}
	if err != nil {
		return nil, rgwStatus(err, fmt.Sprintf("reading RGW user %q", id))
	}
	if u.UserID == "" && u.DisplayName == "" {
		// A store that answers 200 with no user (non-conformant): not one the driver made.
		return nil, status.Errorf(codes.Internal, "reading RGW user %q: the store answered without a user", id)
	}
	return &u, nil
}

// Grant implements Accounts.
func (a *RGWAccounts) Grant(ctx context.Context, id string, grants []bucketGrant) (Key, error) {
	u, err := a.getUser(ctx, id)
	if err != nil {
		return Key{}, err
	}
	if u != nil && u.DisplayName != rgwDisplayPrefix+id {
		return Key{}, status.Errorf(codes.AlreadyExists, "RGW user %q exists and was not created by this driver", id)
	}
	existed := u != nil
	if u == nil {
		u = &rgwUser{}
		err := a.admin(ctx, http.MethodPut, "user", url.Values{"uid": {id}, "display-name": {rgwDisplayPrefix + id},
			"max-buckets": {"-1"}, "generate-key": {"true"}, "key-type": {"s3"}}, u)
		if err != nil {
			return Key{}, rgwStatus(err, fmt.Sprintf("creating RGW user %q", id))
		}
	}
	if len(u.Keys) == 0 {
		err := a.admin(
			ctx,
			http.MethodPut,
			"user",
			url.Values{"key": {""}, "uid": {id}, "key-type": {"s3"}, "generate-key": {"true"}},
			&u.Keys,
		)
		if err != nil {
			return Key{}, rgwStatus(err, fmt.Sprintf("creating a key for RGW user %q", id))
		}
	}
	key := u.newestKey(id)
	if key.AccessKeyID == "" {
		return Key{}, status.Errorf(codes.Internal, "RGW user %q has no S3 key of its own", id)
	}
	stmts := make([][]Statement, len(grants))
	for i, g := range grants {
		principal := &Principal{AWS: []string{"arn:aws:iam:::user/" + id}}
		stmts[i] = g.statements(rgwSid(id), principal, rgwUnknownActions)
		if _, objectActs := g.bucketActions(); slices.Contains(objectActs, "s3:PutObject") {
			stmts[i] = append(stmts[i], rgwACLDenials(rgwSid(id), principal, g.Bucket)...)
			stmts[i] = append(stmts[i], rgwLockDenial(rgwSid(id), principal, g))
		}
		if existed {
			// Checked on every bucket before any policy changes.
			if err := a.checkGrant(ctx, g.Bucket, id, stmts[i]); err != nil {
				return Key{}, err
			}
		}
	}
	for i, g := range grants {
		if err := a.setStatements(ctx, g.Bucket, id, stmts[i]); err != nil {
			return Key{}, err
		}
	}
	return key, nil
}

// checkGrant returns AlreadyExists when account id's statements in bucket's policy allow other
// actions than stmts: the same account ID with another grant. A bucket without its statements
// (a grant that did not finish) passes. Like samePolicy, objectLockActions are not counted, and
// neither are the denials, which earlier versions of the driver wrote otherwise: a repeated grant
// of such an access is the same grant, and writes them anew.
func (a *RGWAccounts) checkGrant(ctx context.Context, bucket, id string, stmts []Statement) error {
	policy, err := a.readPolicy(ctx, bucket)
	if err != nil || policy == nil {
		return err
	}
	prefix := rgwSid(id)
	var have []Statement
	for _, raw := range policy.statements {
		var s Statement
		if owned(raw, prefix) && json.Unmarshal(raw, &s) == nil {
			have = append(have, s)
		}
	}
	granted := allowedActions(have)
	if len(granted) > 0 && !maps.Equal(granted, allowedActions(stmts)) {
		return status.Errorf(codes.AlreadyExists, "RGW user %q exists with another grant to bucket %q", id, bucket)
	}
	return nil
}

// allowedActions is the set of (action, resource) that stmts allow, without objectLockActions.
func allowedActions(stmts []Statement) map[string]bool {
	out := map[string]bool{}
	for _, s := range stmts {
		if s.Effect != "Allow" {
			continue
		}
		for _, act := range s.Action {
			if slices.Contains(objectLockActions, act) {
				continue
			}
			for _, r := range s.Resource {
				out[act+"\x00"+r] = true
			}
		}
	}
	return out
}

// rgwWideningCannedACLs are the canned ACLs that let someone other than the uploader and the
// bucket owner at an object. "private", "bucket-owner-read" and "bucket-owner-full-control" are
// not among them.
var rgwWideningCannedACLs = []string{
	"public-read",
	"public-read-write",
	"authenticated-read",
	"aws-exec-read",
	"log-delivery-write",
}

// rgwGrantHeaders are the ACL grant headers of an upload (x-amz-grant-<name>), with the Sid
// suffix of the statement that denies each.
var rgwGrantHeaders = []struct{ header, sid string }{
	{"read", "DenyGrantRead"}, {"write", "DenyGrantWrite"}, {"read-acp", "DenyGrantReadAcp"},
	{"write-acp", "DenyGrantWriteAcp"}, {"full-control", "DenyGrantFullControl"},
}

// sidDenyACL is the Sid suffix of the statement that denies uploads with a widening canned ACL.
const sidDenyACL = "DenyCannedAcl"

// rgwACLDenials are the statements that keep an access with s3:PutObject from deciding who else
// reads what it uploads. Ceph RGW checks only s3:PutObject for an upload (PutObject, CopyObject,
// CreateMultipartUpload) that sets an ACL in its headers (AWS also wants s3:PutObjectAcl, which
// the driver never grants): a workload could make the bucket's data public with x-amz-acl:
// public-read. Each statement denies uploads that carry one such header. RGW 16 evaluates them
// for PutObject only; for CopyObject and CreateMultipartUpload, IgnorePublicAcls on the buckets
// the driver creates makes public ACLs ineffective (ignorePublicACLsOnNewBuckets). The
// statements stay on every bucket: they also refuse grants to named users, which
// IgnorePublicAcls does not concern, and imported buckets have no block. The conditions test
// that a value is present (StringEquals, StringLike "*"), because operators that test absence
// (Null, StringNotEquals on a missing key) do not evaluate alike across RGW versions; a condition
// on a header the request does not carry is false, so plain and private uploads are not denied.
func rgwACLDenials(prefix string, principal *Principal, bucket string) []Statement {
	deny := func(sid, op, key string, values []string) Statement {
		return Statement{Sid: prefix + sid, Effect: "Deny", Principal: principal, Action: []string{"s3:PutObject"},
			Resource: []string{"arn:aws:s3:::" + bucket + "/*"}, Condition: map[string]map[string][]string{op: {key: values}}}
	}
	out := []Statement{deny(sidDenyACL, "StringEquals", "s3:x-amz-acl", rgwWideningCannedACLs)}
	for _, h := range rgwGrantHeaders {
		out = append(out, deny(h.sid, "StringLike", "s3:x-amz-grant-"+h.header, []string{"*"}))
	}
	return out
}

// sidDenyObjectLock is the Sid suffix of the statement of rgwLockDenial.
const sidDenyObjectLock = "DenyObjectLock"

// rgwLockDenial is the statement that keeps an access that writes objects from changing their
// locks beyond what it was granted. RGW 16 authorizes PutObjectRetention, PutObjectLegalHold and
// the bypass of a GOVERNANCE retention (s3:BypassGovernanceRetention, for DeleteObject and
// PutObjectRetention) by the object's ACL when no statement allows or denies them, and an
// object's ACL gives its uploader full control: without an explicit Deny, a key that uploaded
// an object could lock it, and delete it through a GOVERNANCE retention, with no Allow for
// either. So s3:BypassGovernanceRetention is always denied, and s3:PutObjectRetention and
// s3:PutObjectLegalHold too unless the access opts in (ParamAllowObjectLock).
func rgwLockDenial(prefix string, principal *Principal, g bucketGrant) Statement {
	acts := []string{"s3:BypassGovernanceRetention"}
	if !g.LockObjects {
		acts = append(acts, objectLockActions...)
	}
	return Statement{Sid: prefix + sidDenyObjectLock, Effect: "Deny", Principal: principal, Action: acts,
		Resource: []string{"arn:aws:s3:::" + g.Bucket + "/*"}}
}

// rgwSid is the statement ID prefix of account id's statements in a bucket policy.
func rgwSid(id string) string {
	var b strings.Builder
	b.WriteString("Cosi")
	for _, r := range id {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		}
	}
	sum := sha256.Sum256([]byte(id))
	return b.String() + hex.EncodeToString(sum[:4])
}

// rawPolicy is a bucket policy as the driver edits it: its statements as the JSON they are, so
// that statements the driver does not own (an admin's, with Condition, NotPrincipal, NotAction,
// NotResource or fields the driver does not know) are written back with the same meaning, and
// the policy's other fields (Version, Id, ...) as they are.
type rawPolicy struct {
	fields     map[string]json.RawMessage
	statements []json.RawMessage
}

func parseRawPolicy(doc string) (rawPolicy, error) {
	p := rawPolicy{fields: map[string]json.RawMessage{}}
	if err := json.Unmarshal([]byte(doc), &p.fields); err != nil {
		return p, err
	}
	stmts := bytes.TrimSpace(p.fields["Statement"])
	delete(p.fields, "Statement")
	switch {
	case len(stmts) == 0:
	case stmts[0] == '[':
		if err := json.Unmarshal(stmts, &p.statements); err != nil {
			return p, err
		}
	default: // the policy grammar allows a single statement without the list
		p.statements = []json.RawMessage{stmts}
	}
	return p, nil
}

// owned reports whether statement s is one of the driver's for the Sid prefix: its Sid is
// exactly one the driver writes with that prefix (the Bucket and Objects grants, and the
// denials of rgwACLDenials and rgwLockDenial). Only exactly: a prefix match would also take
// the statements of an account whose ID continues where this one's prefix ends (account "a"+X,
// whose prefix starts with "a"'s when X is "a"'s hash) and an admin's statement named
// "<prefix>Audit", and a repeated grant or a revoke would delete them.
func owned(s json.RawMessage, prefix string) bool {
	var sid struct {
		Sid string `json:"Sid"`
	}
	// A statement whose Sid is not a string is not the driver's (its Sids are strings).
	if json.Unmarshal(s, &sid) != nil {
		return false
	}
	switch strings.TrimPrefix(sid.Sid, prefix) {
	case sid.Sid:
		return false // no such prefix
	case sidBucket, sidObjects, sidDenyACL, sidDenyObjectLock:
		return true
	}
	for _, h := range rgwGrantHeaders {
		if sid.Sid == prefix+h.sid {
			return true
		}
	}
	return false
}

func (p rawPolicy) marshal() ([]byte, error) {
	out := make(map[string]json.RawMessage, len(p.fields)+1)
	for k, v := range p.fields {
		out[k] = v
	}
	if _, ok := out["Version"]; !ok {
		out["Version"] = json.RawMessage(`"` + policyVersion + `"`)
	}
	stmts, err := json.Marshal(p.statements)
	if err != nil {
		return nil, err
	}
	out["Statement"] = stmts
	return json.Marshal(out)
}

// readPolicy returns bucket's policy, nil when it has none. The error keeps the store's error
// code (apiCode).
func (a *RGWAccounts) readPolicy(ctx context.Context, bucket string) (*rawPolicy, error) {
	out, err := a.s3.GetBucketPolicy(ctx, &s3.GetBucketPolicyInput{Bucket: aws.String(bucket)})
	switch {
	case err == nil:
		policy, err := parseRawPolicy(aws.ToString(out.Policy))
		if err != nil {
			return nil, status.Errorf(
				codes.FailedPrecondition,
				"the policy of bucket %q is not JSON this driver can edit: %v",
				bucket,
				err,
			)
		}
		return &policy, nil
	case apiCode(err) == "NoSuchBucketPolicy":
		return nil, nil
	default:
		return nil, toStatus(err, "reading the policy of bucket %q", bucket)
	}
}

// setStatements replaces account id's statements in bucket's policy with stmts (none: removes
// them), and deletes the policy when it becomes empty. Only statements with the Sids the driver
// gives the account's statements are the driver's (see owned); every other statement and field is
// kept as it is.
func (a *RGWAccounts) setStatements(ctx context.Context, bucket, id string, stmts []Statement) error {
	unlock := a.locks.Lock(bucket)
	defer unlock()
	read, err := a.readPolicy(ctx, bucket)
	if apiCode(err) == "NoSuchBucket" && len(stmts) == 0 {
		return nil
	}
	if err != nil {
		return err
	}
	policy := rawPolicy{fields: map[string]json.RawMessage{}}
	if read != nil {
		policy = *read
	}
	prefix := rgwSid(id)
	kept := make([]json.RawMessage, 0, len(policy.statements)+len(stmts))
	for _, s := range policy.statements {
		if !owned(s, prefix) {
			kept = append(kept, s)
		}
	}
	changed := len(kept) != len(policy.statements) || len(stmts) > 0
	if !changed {
		return nil
	}
	for _, s := range stmts {
		raw, err := json.Marshal(s)
		if err != nil {
			return status.Errorf(codes.Internal, "encoding the policy of bucket %q: %v", bucket, err)
		}
		kept = append(kept, raw)
	}
	policy.statements = kept
	if len(policy.statements) == 0 {
		_, err := a.s3.DeleteBucketPolicy(ctx, &s3.DeleteBucketPolicyInput{Bucket: aws.String(bucket)})
		if err != nil && apiCode(err) != "NoSuchBucket" && apiCode(err) != "NoSuchBucketPolicy" {
			return toStatus(err, "deleting the policy of bucket %q", bucket)
		}
		return nil
	}
	doc, err := policy.marshal()
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the policy of bucket %q: %v", bucket, err)
	}
	_, err = a.s3.PutBucketPolicy(
		ctx,
		&s3.PutBucketPolicyInput{Bucket: aws.String(bucket), Policy: aws.String(string(doc))},
	)
	if err != nil && (apiCode(err) != "NoSuchBucket" || len(stmts) != 0) {
		// InvalidArgument, not OutOfRange: KEP-1979 keeps OutOfRange for a driver that cannot share
		// one credential across buckets, and here the bucket's policy is full of other accesses.
		return policyWriteStatus(err, codes.InvalidArgument, fmt.Sprintf("setting the policy of bucket %q", bucket),
			fmt.Sprintf("it would hold %d statements in %d bytes, those of every BucketAccess to the bucket and "+
				"the admin's (RGW takes at most rgw_max_put_param_size, 1 MiB by default): fewer accesses to it would fit",
				len(policy.statements), len(doc)))
	}
	return nil
}

// Revoke implements Accounts: the user with its keys, then its statements in each bucket's
// policy. The user goes first because that is what ends the access, at once and on every bucket:
// a policy the driver cannot edit for a while (its admin locked the driver out of one bucket)
// fails the revoke, which is retried, but leaves no working key meanwhile. The retry finds no
// user and finishes the policies. A user the driver did not create is left alone.
func (a *RGWAccounts) Revoke(ctx context.Context, id string, buckets []string) error {
	u, err := a.getUser(ctx, id)
	if err != nil {
		return err
	}
	if u != nil && u.DisplayName != rgwDisplayPrefix+id {
		return status.Errorf(codes.FailedPrecondition, "not revoking: RGW user %q was not created by this driver", id)
	}
	if u != nil {
		err = a.admin(ctx, http.MethodDelete, "user", url.Values{"uid": {id}, "purge-data": {"false"}}, nil)
		if e := (*rgwError)(nil); err != nil && (!errors.As(err, &e) || e.Status != http.StatusNotFound) {
			return rgwStatus(err, fmt.Sprintf("deleting RGW user %q", id))
		}
	}
	for _, b := range buckets {
		if err := a.setStatements(ctx, b, id, nil); err != nil {
			return err
		}
	}
	return nil
}

// List implements Accounts: the RGW users the driver created.
func (a *RGWAccounts) List(ctx context.Context) ([]string, error) {
	var ids []string
	if err := a.admin(ctx, http.MethodGet, "metadata/user", url.Values{}, &ids); err != nil {
		return nil, rgwStatus(err, "listing RGW users")
	}
	var ours []string
	for _, id := range ids {
		u, err := a.getUser(ctx, id)
		if err != nil {
			return nil, err
		}
		if u != nil && u.DisplayName == rgwDisplayPrefix+id {
			ours = append(ours, id)
		}
	}
	return ours, nil
}
