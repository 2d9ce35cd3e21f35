package azure

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// An access's stored access policies. Each token the driver hands out is bound to a policy of its
// own, never reused and never extended: a grant adds one ("<account ID>.<suffix>"), a rotation or
// a renewal adds the next and the sidecar retires the previous one after its grace period. So a
// copy of a token that expired or was retired stays refused: nothing brings its policy back, and
// no later policy has its ID. The suffix is the moment the policy was made (nanoseconds since
// 1970, base 36, suffixLen digits): the newest policy of an account is the one with the greatest.
// A policy named like the account itself was made by an earlier version of the driver; it is the
// account's oldest.
//
// A credential_id names the container and the policy, "<container>/<policy ID>": a retirement
// names no bucket.

// suffixLen is the length of a policy ID's suffix: base 36 nanoseconds fit in 13 digits.
const suffixLen = 13

// maxAccountID is the longest account ID the driver grants: its policies' IDs add a dot and the
// suffix, and must stay within Azure's 64 characters.
const maxAccountID = maxPolicyID - 1 - suffixLen

// accessSlots is how many accesses a container serves at a time: Azure allows five stored
// access policies per container, and one is kept free so that an access can always be renewed or
// rotated (its next policy exists next to the previous one during the grace period). The
// admin's own policies on an imported container count as accesses.
const accessSlots = MaxStoredAccessPolicies - 1

// newPolicyID is the ID of a new policy of account id, made at now.
func newPolicyID(id string, now time.Time) string {
	s := strconv.FormatInt(now.UnixNano(), 36)
	return id + "." + strings.Repeat("0", suffixLen-len(s)) + s
}

// policyOwner returns the account a policy ID belongs to: the ID without its suffix, or the ID
// itself (an earlier version's policy, or the admin's own).
func policyOwner(pid string) string {
	i := strings.LastIndexByte(pid, '.')
	if i < 0 || len(pid)-i-1 != suffixLen {
		return pid
	}
	for _, r := range pid[i+1:] {
		if (r < '0' || r > '9') && (r < 'a' || r > 'z') {
			return pid
		}
	}
	return pid[:i]
}

// policySet is a container's stored access policies, as read.
type policySet []*container.SignedIdentifier

// of returns the policies of account id, oldest first.
func (s policySet) of(id string) []*container.SignedIdentifier {
	var mine []*container.SignedIdentifier
	for _, p := range s {
		if p.ID != nil && policyOwner(*p.ID) == id {
			mine = append(mine, p)
		}
	}
	// IDs of one account differ in their suffix only, all of one length but the earlier
	// version's, which is shorter: oldest first.
	for i := 1; i < len(mine); i++ {
		for j := i; j > 0 && newer(*mine[j-1].ID, *mine[j].ID); j-- {
			mine[j-1], mine[j] = mine[j], mine[j-1]
		}
	}
	return mine
}

// newer reports whether policy a of an account was made after policy b of it.
func newer(a, b string) bool {
	if len(a) != len(b) {
		return len(a) > len(b)
	}
	return a > b
}

// find returns the policy pid, or nil.
func (s policySet) find(pid string) *container.SignedIdentifier {
	for _, p := range s {
		if p.ID != nil && *p.ID == pid {
			return p
		}
	}
	return nil
}

// without returns the policies but those drop says.
func (s policySet) without(drop func(*container.SignedIdentifier) bool) policySet {
	var kept policySet
	for _, p := range s {
		if !drop(p) {
			kept = append(kept, p)
		}
	}
	return kept
}

// accounts counts the accounts (and the admin's own policies) that hold policies, but id.
func (s policySet) accounts(id string) int {
	seen := map[string]bool{}
	for _, p := range s {
		if p.ID != nil && policyOwner(*p.ID) != id {
			seen[policyOwner(*p.ID)] = true
		}
	}
	return len(seen)
}

// expired reports whether policy p's expiry passed.
func expired(p *container.SignedIdentifier, now time.Time) bool {
	return p.AccessPolicy != nil && p.AccessPolicy.Expiry != nil && !p.AccessPolicy.Expiry.After(now)
}

// full returns why account id cannot have a policy added to s, or nil: a container whose
// accesses fill its slots refuses a new access for good (InvalidArgument: it is not granted when
// another access goes, and a sidecar retrying it would hold it waiting without end); one whose
// five policies are taken by other accesses' rotations refuses it for their grace period
// (ResourceExhausted, retried).
//
// member says whether account id held policies on the container before this change (its own
// expired ones, dropped to make room, or one to rotate from): it is then no new access, whatever
// the count of the others, which an earlier version of the driver (five accesses per container)
// or an admin adding policies of their own may have taken past the slots.
func (s policySet) full(bucket, id string, member bool) error {
	if !member && s.accounts(id) >= accessSlots {
		return status.Errorf(codes.InvalidArgument,
			"container %q already serves %d accesses (the admin's own stored access policies count as one each): "+
				"Azure allows %d stored access policies per container and the driver keeps one free for renewals "+
				"and rotations, so a bucket serves at most %d accesses at a time; this access is not granted, "+
				"also not later: delete it, and share the Secret of another access to the bucket",
			bucket, s.accounts(id), MaxStoredAccessPolicies, accessSlots)
	}
	if len(s) >= MaxStoredAccessPolicies {
		return status.Errorf(codes.ResourceExhausted,
			"container %q has %d stored access policies, Azure's limit: another access's renewal or rotation "+
				"holds its previous policy for the grace period; retried", bucket, len(s))
	}
	return nil
}

// credentialID is the credential_id of policy pid of container bucket.
func credentialID(bucket, pid string) string { return bucket + "/" + pid }

// parseCredentialID returns the container and policy a credential_id of account id names.
func parseCredentialID(id, credID string) (bucket, pid string, err error) {
	bucket, pid, ok := strings.Cut(credID, "/")
	if !ok || !validContainerName(bucket) || !validPolicyID(pid) || policyOwner(pid) != id {
		return "", "", status.Errorf(codes.NotFound,
			"credential %q is not one of account %q (<container>/<stored access policy ID>)", credID, id)
	}
	return bucket, pid, nil
}

// editPolicies changes the stored access policies of container bucket: edit gets them as read and
// returns them as they should be, and whether they changed. The driver's lock orders its own
// calls, the container's lease everyone's (holdPolicies). A missing container is NotFound.
func (d *Driver) editPolicies(
	ctx context.Context, bucket string, edit func(policySet) (policySet, bool, error),
) error {
	unlock := d.locks.Lock(bucket)
	defer unlock()
	c, err := d.container(bucket)
	if err != nil {
		return err
	}
	leaseID, release, err := d.holdPolicies(ctx, c, bucket)
	if err != nil {
		return err
	}
	defer release()
	acl, err := c.GetAccessPolicy(ctx, nil)
	if err != nil {
		return toStatus(err, "reading the stored access policies of container %q", bucket)
	}
	ids, changed, err := edit(acl.SignedIdentifiers)
	if err != nil || !changed {
		return err
	}
	if err := setPolicies(ctx, c, leaseID, acl, ids); err != nil {
		return toStatus(err, "writing the stored access policies of container %q", bucket)
	}
	return nil
}
