package s3

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"reflect"
	"slices"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/iam"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// MaxRolePolicySize is AWS's limit on the total size of a role's inline policies, in characters,
// not counting white space (the Versity IAM service has the same).
const MaxRolePolicySize = 10240

// rolePrefix marks roles among the identities List returns: a role and a user may share a name.
const rolePrefix = "role/"

// trustPolicy is the trust policy of a ServiceAccount access's role: one statement letting
// tokens of one issuer assume the role, on conditions of their subject and audience.
type trustPolicy struct {
	Version   string           `json:"Version"`
	Statement []trustStatement `json:"Statement"`
}

type trustStatement struct {
	Effect    string                       `json:"Effect"`
	Principal trustPrincipal               `json:"Principal"`
	Action    string                       `json:"Action"`
	Condition map[string]map[string]string `json:"Condition"`
}

type trustPrincipal struct {
	Federated string `json:"Federated"`
}

// newTrustPolicy trusts tokens of the OIDC provider providerARN (for trust.Issuer) whose sub is
// exactly trust.Subject and whose aud is exactly trust.Audience. StringEquals, never StringLike:
// a name is not a pattern.
func newTrustPolicy(providerARN string, trust WebIdentityTrust) trustPolicy {
	key := strings.TrimPrefix(trust.Issuer, "https://")
	return trustPolicy{Version: policyVersion, Statement: []trustStatement{{
		Effect:    "Allow",
		Principal: trustPrincipal{Federated: providerARN},
		Action:    "sts:AssumeRoleWithWebIdentity",
		Condition: map[string]map[string]string{"StringEquals": {
			key + ":sub": trust.Subject,
			key + ":aud": trust.Audience,
		}},
	}}}
}

// GrantRole implements RoleAccounts: the OIDC provider of the issuer (created once, or completed
// with the audience), a role under IAMPath trusting only the ServiceAccount's tokens, and the
// role's inline policy, the same document a user of a key access gets.
func (a *IAMAccounts) GrantRole(ctx context.Context, id string, trust WebIdentityTrust, grants []bucketGrant) (
	string, error,
) {
	doc, err := json.Marshal(userPolicy(grants))
	if err != nil {
		return "", status.Errorf(codes.Internal, "encoding the policy of role %q: %v", id, err)
	}
	if size := policySize(doc); size > MaxRolePolicySize {
		return "", status.Errorf(codes.OutOfRange,
			"the IAM policy for this access to %d buckets needs %d characters, more than the %d an IAM role's inline "+
				"policies may have: grant fewer buckets per BucketAccess (use several BucketAccesses), or fewer access modes",
			len(grants), size, MaxRolePolicySize)
	}
	if err := a.checkNoUser(ctx, id); err != nil {
		return "", err
	}
	providerARN, err := a.ensureProvider(ctx, trust)
	if err != nil {
		return "", err
	}
	trustDoc, err := json.Marshal(newTrustPolicy(providerARN, trust))
	if err != nil {
		return "", status.Errorf(codes.Internal, "encoding the trust policy of role %q: %v", id, err)
	}

	var arn string
	out, err := a.client.CreateRole(ctx, &iam.CreateRoleInput{
		RoleName: aws.String(id), Path: aws.String(IAMPath), AssumeRolePolicyDocument: aws.String(string(trustDoc)),
		Description: aws.String("COSI BucketAccess of ServiceAccount " + strings.TrimPrefix(trust.Subject, subjectPrefix)),
	})
	switch {
	case err == nil && out.Role != nil:
		arn = aws.ToString(out.Role.Arn)
	case err == nil:
		return "", status.Errorf(codes.Internal, "creating IAM role %q: the IAM service answered without the role", id)
	case apiCode(err) == "EntityAlreadyExists":
		if arn, err = a.checkRole(ctx, id, trustDoc, doc); err != nil {
			return "", err
		}
	default:
		return "", toStatus(err, "creating IAM role %q", id)
	}

	if _, err := a.client.PutRolePolicy(ctx, &iam.PutRolePolicyInput{
		RoleName: aws.String(id), PolicyName: aws.String(iamPolicyName), PolicyDocument: aws.String(string(doc)),
	}); err != nil {
		return "", policyWriteStatus(err, codes.OutOfRange, fmt.Sprintf("setting the policy of IAM role %q", id),
			fmt.Sprintf("it grants access to %d buckets (%d characters): grant fewer buckets per BucketAccess",
				len(grants), policySize(doc)))
	}
	if arn == "" {
		return "", status.Errorf(codes.Internal, "IAM role %q has no ARN", id)
	}
	return arn, nil
}

// checkNoUser returns AlreadyExists when id is the user of a key access: one account ID, one
// access.
func (a *IAMAccounts) checkNoUser(ctx context.Context, id string) error {
	out, err := a.client.GetUser(ctx, &iam.GetUserInput{UserName: aws.String(id)})
	switch {
	case err == nil && out.User == nil:
		return status.Errorf(codes.Internal, "reading IAM user %q: the IAM service answered without the user", id)
	case err == nil:
		return status.Errorf(codes.AlreadyExists, "account %q exists as the IAM user of a key access", id)
	case apiCode(err) == "NoSuchEntity":
		return nil
	}
	return toStatus(err, "reading IAM user %q", id)
}

// checkNoRole returns AlreadyExists when id is the role of a ServiceAccount access.
func (a *IAMAccounts) checkNoRole(ctx context.Context, id string) error {
	out, err := a.client.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(id)})
	switch {
	case err == nil && out.Role == nil:
		return status.Errorf(codes.Internal, "reading IAM role %q: the IAM service answered without the role", id)
	case err == nil:
		return status.Errorf(codes.AlreadyExists, "account %q exists as the IAM role of a ServiceAccount access", id)
	case apiCode(err) == "NoSuchEntity":
		return nil
	}
	return toStatus(err, "reading IAM role %q", id)
}

// checkRole returns the ARN of the existing role id, or AlreadyExists unless it is the driver's
// (under IAMPath) with the trust policy trustDoc and, when it has one yet, the policy doc.
func (a *IAMAccounts) checkRole(ctx context.Context, id string, trustDoc, doc []byte) (string, error) {
	out, err := a.client.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(id)})
	if err != nil {
		return "", toStatus(err, "reading IAM role %q", id)
	}
	if out.Role == nil {
		return "", status.Errorf(codes.Internal, "reading IAM role %q: the IAM service answered without the role", id)
	}
	if p := aws.ToString(out.Role.Path); p != IAMPath {
		return "", status.Errorf(codes.AlreadyExists, "IAM role %q exists and was not created by this driver "+
			"(path %q, not %q)", id, p, IAMPath)
	}
	if !sameTrust(decodePolicy(aws.ToString(out.Role.AssumeRolePolicyDocument)), trustDoc) {
		return "", status.Errorf(codes.AlreadyExists,
			"IAM role %q exists trusting another ServiceAccount, audience or issuer", id)
	}
	pol, err := a.client.GetRolePolicy(ctx, &iam.GetRolePolicyInput{
		RoleName: aws.String(id), PolicyName: aws.String(iamPolicyName),
	})
	switch {
	case apiCode(err) == "NoSuchEntity":
		// Created, but the grant did not finish.
	case err != nil:
		return "", toStatus(err, "reading the policy of IAM role %q", id)
	case !samePolicy(decodePolicy(aws.ToString(pol.PolicyDocument)), doc):
		return "", status.Errorf(codes.AlreadyExists, "IAM role %q exists with another grant", id)
	}
	return aws.ToString(out.Role.Arn), nil
}

// decodePolicy undoes the URL encoding IAM returns policy documents in.
func decodePolicy(doc string) []byte {
	if unescaped, err := url.QueryUnescape(doc); err == nil {
		return []byte(unescaped)
	}
	return []byte(doc)
}

// sameTrust reports whether two trust policies say the same, white space and key order aside:
// anything the driver does not write (another statement, principal or condition) makes them differ.
func sameTrust(a, b []byte) bool {
	var pa, pb any
	return json.Unmarshal(a, &pa) == nil && json.Unmarshal(b, &pb) == nil && reflect.DeepEqual(pa, pb)
}

// ensureProvider returns the ARN of the IAM OIDC provider of trust.Issuer, creating it with the
// audience and thumbprints, or adding the audience (and the thumbprints, when configured) to the
// provider that exists: created by an earlier grant, or by the admin. The driver never deletes it:
// one provider serves every ServiceAccount access of the cluster.
func (a *IAMAccounts) ensureProvider(ctx context.Context, trust WebIdentityTrust) (string, error) {
	out, err := a.client.CreateOpenIDConnectProvider(ctx, &iam.CreateOpenIDConnectProviderInput{
		Url: aws.String(trust.Issuer), ClientIDList: []string{trust.Audience}, ThumbprintList: trust.Thumbprints,
	})
	if err == nil && aws.ToString(out.OpenIDConnectProviderArn) == "" {
		return "", status.Errorf(codes.Internal, "registering the OIDC provider of issuer %q: the IAM service "+
			"answered without its ARN", trust.Issuer)
	}
	if err == nil {
		return aws.ToString(out.OpenIDConnectProviderArn), nil
	}
	if apiCode(err) != "EntityAlreadyExists" {
		return "", toStatus(err, "registering the cluster's ServiceAccount issuer %q as an OIDC provider", trust.Issuer)
	}
	arn, err := a.providerARN(ctx, trust.Issuer)
	if err != nil {
		return "", err
	}
	got, err := a.client.GetOpenIDConnectProvider(ctx, &iam.GetOpenIDConnectProviderInput{
		OpenIDConnectProviderArn: aws.String(arn),
	})
	if err != nil {
		return "", toStatus(err, "reading the OIDC provider of issuer %q", trust.Issuer)
	}
	if !slices.Contains(got.ClientIDList, trust.Audience) {
		if _, err := a.client.AddClientIDToOpenIDConnectProvider(ctx, &iam.AddClientIDToOpenIDConnectProviderInput{
			OpenIDConnectProviderArn: aws.String(arn), ClientID: aws.String(trust.Audience),
		}); err != nil {
			return "", toStatus(err, "adding audience %q to the OIDC provider of issuer %q", trust.Audience, trust.Issuer)
		}
	}
	if len(trust.Thumbprints) > 0 && !sameSet(got.ThumbprintList, trust.Thumbprints) {
		if _, err := a.client.UpdateOpenIDConnectProviderThumbprint(ctx,
			&iam.UpdateOpenIDConnectProviderThumbprintInput{
				OpenIDConnectProviderArn: aws.String(arn), ThumbprintList: trust.Thumbprints,
			}); err != nil {
			return "", toStatus(err, "setting the thumbprints of the OIDC provider of issuer %q", trust.Issuer)
		}
	}
	return arn, nil
}

// providerARN finds the ARN of the OIDC provider of issuer: IAM names it
// arn:aws:iam::<account>:oidc-provider/<issuer without https://>.
func (a *IAMAccounts) providerARN(ctx context.Context, issuer string) (string, error) {
	out, err := a.client.ListOpenIDConnectProviders(ctx, &iam.ListOpenIDConnectProvidersInput{})
	if err != nil {
		return "", toStatus(err, "listing the OIDC providers")
	}
	suffix := ":oidc-provider/" + strings.TrimPrefix(issuer, "https://")
	for _, p := range out.OpenIDConnectProviderList {
		if arn := aws.ToString(p.Arn); strings.HasSuffix(arn, suffix) {
			return arn, nil
		}
	}
	// It existed a moment ago: deleted in between. The retry creates it.
	return "", status.Errorf(codes.Unavailable, "the OIDC provider of issuer %q exists but is not listed", issuer)
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	for i := range a {
		a[i] = strings.ToLower(a[i])
	}
	for i := range b {
		b[i] = strings.ToLower(b[i])
	}
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

// RevokeRole implements RoleAccounts: the role's policy, then the role. A role that is not under
// IAMPath is left alone.
func (a *IAMAccounts) RevokeRole(ctx context.Context, id string) error {
	out, err := a.client.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String(id)})
	switch {
	case apiCode(err) == "NoSuchEntity":
		return nil
	case err != nil:
		return toStatus(err, "reading IAM role %q", id)
	case out.Role == nil:
		return status.Errorf(codes.Internal, "reading IAM role %q: the IAM service answered without the role", id)
	case aws.ToString(out.Role.Path) != IAMPath:
		return status.Errorf(codes.FailedPrecondition, "not revoking: IAM role %q exists and was not created by this "+
			"driver (path %q, not %q)", id, aws.ToString(out.Role.Path), IAMPath)
	}
	_, err = a.client.DeleteRolePolicy(ctx, &iam.DeleteRolePolicyInput{
		RoleName: aws.String(id), PolicyName: aws.String(iamPolicyName),
	})
	if err != nil && apiCode(err) != "NoSuchEntity" {
		return toStatus(err, "deleting the policy of IAM role %q", id)
	}
	_, err = a.client.DeleteRole(ctx, &iam.DeleteRoleInput{RoleName: aws.String(id)})
	if err != nil && apiCode(err) != "NoSuchEntity" {
		return toStatus(err, "deleting IAM role %q", id)
	}
	return nil
}

// listRoles returns the roles under IAMPath, as rolePrefix + name.
func (a *IAMAccounts) listRoles(ctx context.Context) ([]string, error) {
	var names []string
	pages := iam.NewListRolesPaginator(a.client, &iam.ListRolesInput{PathPrefix: aws.String(IAMPath)})
	for pages.HasMorePages() {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return nil, toStatus(err, "listing IAM roles")
		}
		for _, r := range page.Roles {
			if strings.HasPrefix(aws.ToString(r.Path), IAMPath) {
				names = append(names, rolePrefix+aws.ToString(r.RoleName))
			}
		}
	}
	return names, nil
}
