package s3

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	iamtypes "github.com/aws/aws-sdk-go-v2/service/iam/types"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// IAMPath is the IAM path of every user the driver creates; only users under it are the driver's.
const IAMPath = "/cosi/"

// iamPolicyName is the name of the inline policy of each user.
const iamPolicyName = "cosi-bucket-access"

// IAMAccounts is the account back-end for the AWS IAM API: one IAM user per BucketAccess, under
// IAMPath, with one inline policy listing the granted actions per bucket and one access key. It
// works with AWS and with the Versity S3 gateway's IAM service.
//
// IAM never returns a secret key twice, so a repeated grant creates a new key. It keeps the
// newest previous key, so a key already handed out keeps working, and deletes older ones (IAM
// allows two keys per user).
type IAMAccounts struct {
	client *iam.Client
	// MaxPolicySize is the most characters (white space not counted) the user's inline policy
	// may have; a grant that needs more is refused with OutOfRange before anything is created.
	// Zero means MaxInlinePolicySize, AWS's limit (the Versity IAM service has the same).
	MaxPolicySize int
	// roles is set by New when the driver serves ServiceAccount authentication: only then do key
	// grants check that the account is not a role (which needs iam:GetRole).
	roles bool
}

func (a *IAMAccounts) useRoles(on bool) { a.roles = on }

// NewIAMAccounts returns an IAM back-end for the IAM endpoint (empty means AWS's).
func NewIAMAccounts(endpoint string, creds aws.CredentialsProvider, httpClient *http.Client) *IAMAccounts {
	opts := iam.Options{Region: "us-east-1", Credentials: creds}
	if endpoint != "" {
		opts.BaseEndpoint = aws.String(endpoint)
	}
	if httpClient != nil {
		opts.HTTPClient = httpClient
	}
	return &IAMAccounts{client: iam.New(opts)}
}

// Grant implements Accounts.
func (a *IAMAccounts) Grant(ctx context.Context, id string, grants []bucketGrant) (Key, error) {
	doc, err := json.Marshal(userPolicy(grants))
	if err != nil {
		return Key{}, status.Errorf(codes.Internal, "encoding the policy of user %q: %v", id, err)
	}
	// Checked before anything is created: repeating the grant cannot make the policy fit.
	if err := a.checkSize(doc, len(grants)); err != nil {
		return Key{}, err
	}

	if a.roles {
		if err := a.checkNoRole(ctx, id); err != nil {
			return Key{}, err
		}
	}
	_, err = a.client.CreateUser(ctx, &iam.CreateUserInput{UserName: aws.String(id), Path: aws.String(IAMPath)})
	switch {
	case err == nil:
	case apiCode(err) == "EntityAlreadyExists":
		if err := a.checkOurs(ctx, id); err != nil {
			return Key{}, err
		}
		if err := a.checkPolicy(ctx, id, doc); err != nil {
			return Key{}, err
		}
	default:
		return Key{}, toStatus(err, "creating IAM user %q", id)
	}

	if _, err := a.client.PutUserPolicy(
		ctx,
		&iam.PutUserPolicyInput{UserName: aws.String(id), PolicyName: aws.String(iamPolicyName),
			PolicyDocument: aws.String(string(doc))},
	); err != nil {
		// The store's limit may be lower than MaxPolicySize: as final as the driver's own check.
		return Key{}, policyWriteStatus(err, codes.OutOfRange, fmt.Sprintf("setting the policy of IAM user %q", id),
			fmt.Sprintf("it grants access to %d buckets (%d characters): grant fewer buckets per BucketAccess",
				len(grants), policySize(doc)))
	}

	keys, err := a.keys(ctx, id)
	if err != nil {
		return Key{}, err
	}
	// Keep the newest key; delete the others so there is room for the new one.
	for len(keys) > 1 {
		if err := a.deleteKey(ctx, id, keys[0]); err != nil {
			return Key{}, err
		}
		keys = keys[1:]
	}
	return a.createKey(ctx, id)
}

// createKey creates an access key for user id.
func (a *IAMAccounts) createKey(ctx context.Context, id string) (Key, error) {
	out, err := a.client.CreateAccessKey(ctx, &iam.CreateAccessKeyInput{UserName: aws.String(id)})
	if err != nil {
		return Key{}, toStatus(err, "creating an access key for IAM user %q", id)
	}
	if out.AccessKey == nil || aws.ToString(out.AccessKey.AccessKeyId) == "" ||
		aws.ToString(out.AccessKey.SecretAccessKey) == "" {
		// A non-conformant store. Retrying creates another key and deletes the oldest.
		return Key{}, status.Errorf(
			codes.Internal,
			"creating an access key for IAM user %q: the IAM service answered without the key",
			id,
		)
	}
	return Key{
		AccessKeyID:     aws.ToString(out.AccessKey.AccessKeyId),
		SecretAccessKey: aws.ToString(out.AccessKey.SecretAccessKey),
	}, nil
}

// checkSize returns OutOfRange when doc is larger than the store allows.
func (a *IAMAccounts) checkSize(doc []byte, buckets int) error {
	limit := a.MaxPolicySize
	if limit <= 0 {
		limit = MaxInlinePolicySize
	}
	if size := policySize(doc); size > limit {
		return status.Errorf(
			codes.OutOfRange,
			"the IAM policy for this access to %d buckets needs %d characters, "+
				"more than the %d an IAM user's inline policies may have: "+
				"grant fewer buckets per BucketAccess (use several BucketAccesses), or fewer access modes",
			buckets,
			size,
			limit,
		)
	}
	return nil
}

// checkOurs returns AlreadyExists unless user id is under IAMPath.
func (a *IAMAccounts) checkOurs(ctx context.Context, id string) error {
	out, err := a.client.GetUser(ctx, &iam.GetUserInput{UserName: aws.String(id)})
	if err != nil {
		return toStatus(err, "reading IAM user %q", id)
	}
	if out.User == nil {
		// A non-conformant store; without the user there is no telling whose it is.
		return status.Errorf(codes.Internal, "reading IAM user %q: the IAM service answered without the user", id)
	}
	if p := aws.ToString(out.User.Path); p != IAMPath {
		return status.Errorf(
			codes.AlreadyExists,
			"IAM user %q exists and was not created by this driver (path %q, not %q)",
			id,
			p,
			IAMPath,
		)
	}
	return nil
}

// checkPolicy returns AlreadyExists when user id has a policy other than doc: the same account
// ID with another grant.
func (a *IAMAccounts) checkPolicy(ctx context.Context, id string, doc []byte) error {
	out, err := a.client.GetUserPolicy(
		ctx,
		&iam.GetUserPolicyInput{UserName: aws.String(id), PolicyName: aws.String(iamPolicyName)},
	)
	if apiCode(err) == "NoSuchEntity" {
		return nil // created, but the grant did not finish
	}
	if err != nil {
		return toStatus(err, "reading the policy of IAM user %q", id)
	}
	// IAM returns the document URL-encoded.
	have := aws.ToString(out.PolicyDocument)
	if unescaped, err := url.QueryUnescape(have); err == nil {
		have = unescaped
	}
	if !samePolicy([]byte(have), doc) {
		return status.Errorf(codes.AlreadyExists, "IAM user %q exists with another grant", id)
	}
	return nil
}

// samePolicy reports whether two identity policies grant the same actions on the same
// resources, however their statements group them, not counting objectLockActions: they were in
// every objectData write grant before ParamAllowObjectLock, and a repeated grant of such an
// access is the same grant, which PutUserPolicy then narrows.
func samePolicy(a, b []byte) bool {
	pa, okA := policyTuples(a)
	pb, okB := policyTuples(b)
	return okA && okB && maps.Equal(pa, pb)
}

// policyTuples is the set of (effect, action, resource, condition) that doc states.
func policyTuples(doc []byte) (map[string]bool, bool) {
	var p Policy
	if json.Unmarshal(doc, &p) != nil {
		return nil, false
	}
	out := map[string]bool{}
	for _, st := range p.Statement {
		cond, err := json.Marshal(st.Condition)
		if err != nil {
			return nil, false
		}
		for _, act := range st.Action {
			if slices.Contains(objectLockActions, act) {
				continue
			}
			for _, r := range st.Resource {
				out[strings.Join([]string{st.Effect, act, r, string(cond)}, "\x00")] = true
			}
		}
	}
	return out, true
}

// keys returns the access key IDs of user id, oldest first.
func (a *IAMAccounts) keys(ctx context.Context, id string) ([]string, error) {
	out, err := a.client.ListAccessKeys(ctx, &iam.ListAccessKeysInput{UserName: aws.String(id)})
	if err != nil {
		return nil, toStatus(err, "listing the access keys of IAM user %q", id)
	}
	meta := slices.Clone(out.AccessKeyMetadata)
	slices.SortFunc(meta, func(x, y iamtypes.AccessKeyMetadata) int {
		return aws.ToTime(x.CreateDate).Compare(aws.ToTime(y.CreateDate))
	})
	var ids []string
	for _, m := range meta {
		ids = append(ids, aws.ToString(m.AccessKeyId))
	}
	return ids, nil
}

func (a *IAMAccounts) deleteKey(ctx context.Context, user, key string) error {
	_, err := a.client.DeleteAccessKey(
		ctx,
		&iam.DeleteAccessKeyInput{UserName: aws.String(user), AccessKeyId: aws.String(key)},
	)
	if err != nil && apiCode(err) != "NoSuchEntity" {
		return toStatus(err, "deleting an access key of IAM user %q", user)
	}
	return nil
}

// Revoke implements Accounts: keys, then the policy, then the user. A user that is not under
// IAMPath is left alone.
func (a *IAMAccounts) Revoke(ctx context.Context, id string, _ []string) error {
	if err := a.checkOurs(ctx, id); err != nil {
		if status.Code(err) == codes.NotFound {
			return nil
		}
		if status.Code(err) == codes.AlreadyExists {
			return status.Errorf(codes.FailedPrecondition, "not revoking: %v", status.Convert(err).Message())
		}
		return err
	}
	keys, err := a.keys(ctx, id)
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := a.deleteKey(ctx, id, k); err != nil {
			return err
		}
	}
	_, err = a.client.DeleteUserPolicy(
		ctx,
		&iam.DeleteUserPolicyInput{UserName: aws.String(id), PolicyName: aws.String(iamPolicyName)},
	)
	if err != nil && apiCode(err) != "NoSuchEntity" {
		return toStatus(err, "deleting the policy of IAM user %q", id)
	}
	_, err = a.client.DeleteUser(ctx, &iam.DeleteUserInput{UserName: aws.String(id)})
	if err != nil && apiCode(err) != "NoSuchEntity" {
		return toStatus(err, "deleting IAM user %q", id)
	}
	return nil
}

// List implements Accounts: the users under IAMPath, and the roles under it as "role/<name>".
func (a *IAMAccounts) List(ctx context.Context) ([]string, error) {
	users, err := a.listUsers(ctx)
	if err != nil {
		return nil, err
	}
	roles, err := a.listRoles(ctx)
	if err != nil {
		return nil, err
	}
	return append(users, roles...), nil
}

// listUsers returns the users under IAMPath.
func (a *IAMAccounts) listUsers(ctx context.Context) ([]string, error) {
	var names []string
	pages := iam.NewListUsersPaginator(a.client, &iam.ListUsersInput{PathPrefix: aws.String(IAMPath)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, toStatus(err, "listing IAM users")
		}
		for _, u := range page.Users {
			if aws.ToString(u.Path) == IAMPath || strings.HasPrefix(aws.ToString(u.Path), IAMPath) {
				names = append(names, aws.ToString(u.UserName))
			}
		}
	}
	return names, nil
}
