package kubectlcosi

import (
	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Who can act on a problem.
const (
	// WhoUser is the app developer who owns the namespace's claims and accesses.
	WhoUser = "user"
	// WhoAdmin is the cluster admin: classes, namespaces' limits, COSI's deployment.
	WhoAdmin = "admin"
	// WhoDriverOwner runs the driver and its object store.
	WhoDriverOwner = "driver owner"
	// WhoNobody: COSI is working on it and needs nobody.
	WhoNobody = "nobody"
)

// Explanation says what a condition or event reason means, who acts and what to do. The same
// texts are in docs/troubleshooting.md (a test checks that every reason of the API is in both).
type Explanation struct {
	Meaning string `json:"meaning"`
	Who     string `json:"who"`
	Action  string `json:"action"`
}

// Explanations are the explanations of every condition reason and event reason of the API
// (api/objectstorage/v1alpha2/well_known.go), by reason.
var Explanations = map[string]Explanation{
	cosiapi.ReasonPending: {
		Meaning: "COSI has not looked at the object yet",
		Who:     WhoNobody,
		Action:  "wait a moment; if it stays, check that the COSI controller runs (kubectl cosi doctor)",
	},
	cosiapi.ReasonProvisioned: {
		Meaning: "the driver provisioned the bucket or the access",
		Who:     WhoNobody,
		Action:  "nothing",
	},
	cosiapi.ReasonImportedUnverified: {
		Meaning: "an existing bucket was imported without asking the backend whether it exists " +
			"(the driver speaks COSI v1alpha1)",
		Who:    WhoAdmin,
		Action: "nothing, unless the first access fails: then check Bucket.spec.existingBucketID",
	},
	cosiapi.ReasonProvisioning: {
		Meaning: "provisioning is in progress or being retried by the driver's sidecar",
		Who:     WhoNobody,
		Action: "wait; if it lasts, check the Bucket's events and that a sidecar serves the driver " +
			"(kubectl cosi doctor)",
	},
	cosiapi.ReasonProvisioningFailed: {
		Meaning: "provisioning failed with an error that retrying cannot fix",
		Who:     WhoUser,
		Action:  "fix the request (or ask an admin to fix the class) as the message says, then recreate the object",
	},
	cosiapi.ReasonRevoked: {
		Meaning: "the access was revoked and its Secrets deleted; the object is about to go",
		Who:     WhoNobody,
		Action:  "nothing: the controller removes the finalizer",
	},
	cosiapi.ReasonDeleting: {
		Meaning: "the bucket is being deleted in the backend",
		Who:     WhoNobody,
		Action:  "wait; if it lasts, look at the Bucket's FailedDeleteBucket events (driver owner)",
	},
	cosiapi.ReasonDeletionBlocked: {
		Meaning: "deletion waits for something named in the message, such as BucketAccesses that still use the claim",
		Who:     WhoUser,
		Action:  "delete what the message names (usually the BucketAccesses of the claim)",
	},
	cosiapi.ReasonValid: {
		Meaning: "the object and the objects it references are valid",
		Who:     WhoNobody,
		Action:  "nothing",
	},
	cosiapi.ReasonWaitingForResources: {
		Meaning: "a referenced object (class, claim, Bucket) does not exist yet or is not ready",
		Who:     WhoUser,
		Action: "create what the message names, or fix the name; an admin creates missing classes; COSI " +
			"continues on its own once it exists",
	},
	// ReasonWaitingForDriver and EventWaitingForDriver are the same string.
	cosiapi.ReasonWaitingForDriver: {
		Meaning: "no sidecar serves the driver that the class names: nobody holds the driver's Lease",
		Who:     WhoAdmin,
		Action: "deploy or restart the driver and its sidecar, or fix driverName in the class (kubectl cosi " +
			"doctor); COSI continues on its own once a sidecar serves it",
	},
	cosiapi.EventWaitingForClass: {
		Meaning: "the class that the object names does not exist",
		Who:     WhoAdmin,
		Action:  "create the class, or (user) recreate the object with an existing class; COSI continues on its own",
	},
	cosiapi.ReasonInvalidReference: {
		Meaning: "a referenced object is invalid, missing after provisioning, bound elsewhere or being deleted",
		Who:     WhoUser,
		Action:  "fix the reference as the message says (recreate the object with a valid one)",
	},
	cosiapi.ReasonForbiddenByClass: {
		Meaning: "the request asks for something its class forbids (several buckets, an access mode, " +
			"an authentication type)",
		Who:    WhoUser,
		Action: "ask for less, use another BucketAccessClass, or ask an admin to allow it in the class",
	},
	cosiapi.ReasonUnsupportedProtocol: {
		Meaning: "a requested protocol is not supported by the driver or the bucket",
		Who:     WhoUser,
		Action:  "request a protocol the bucket supports, or use a class whose driver supports it",
	},
	cosiapi.ReasonSecretConflict: {
		Meaning: "a Secret with the access's accessSecretName exists and is not COSI's, so COSI will not overwrite it",
		Who:     WhoUser,
		Action: "delete or rename that Secret (or recreate the access with another accessSecretName); the sidecar " +
			"looks again every few seconds",
	},
	cosiapi.ReasonSecretWriteFailed: {
		Meaning: "the access was granted but its Secret cannot be written (a ResourceQuota, a policy, a server error)",
		Who:     WhoAdmin,
		Action:  "fix what the message names (raise the quota, fix the policy); the sidecar retries the write",
	},
	cosiapi.ReasonDriverSucceeded: {
		Meaning: "the latest call to the driver succeeded",
		Who:     WhoNobody,
		Action:  "nothing",
	},
	cosiapi.ReasonDriverError: {
		Meaning: "the latest call to the driver failed; the message has the gRPC code and the driver's message",
		Who:     WhoDriverOwner,
		Action: "fix the backend or the driver's configuration as the message says; the sidecar retries with " +
			"backoff (at most every 5 minutes) unless the error is final",
	},

	cosiapi.EventFailedCreateBucket: {
		Meaning: "the driver failed to create (or find) the bucket, or the claim's Bucket is invalid",
		Who:     WhoDriverOwner,
		Action:  "read the message; fix the backend or the class parameters; the sidecar retries unless the error is final",
	},
	cosiapi.EventFailedDeleteBucket: {
		Meaning: "the driver failed to delete the bucket",
		Who:     WhoDriverOwner,
		Action:  "fix the backend (a bucket that is not empty, missing rights); the sidecar retries until it succeeds",
	},
	cosiapi.EventBucketNotDeleted: {
		Meaning: "the Bucket went with the Delete policy, but its backend bucket was not deleted: the driver had " +
			"answered its creation ALREADY_EXISTS, so this Bucket did not create it and it may be someone else's",
		Who: WhoAdmin,
		Action: "check the bucket in the backend: delete it there if it is a leftover of this claim, keep it if it " +
			"is someone else's",
	},
	cosiapi.EventDriverAccountMayHaveLeaked: {
		Meaning: "a COSI v1alpha1 driver that names its accounts itself may have made an account for this access " +
			"whose answer never reached the sidecar; COSI cannot revoke it",
		Who: WhoAdmin,
		Action: "look in the store for an account of the buckets the message names, made since the time it names, " +
			"that it does not list, and remove it (docs/v1alpha1-drivers.md)",
	},
	cosiapi.EventWaitingForBucket: {
		Meaning: "access cannot be granted yet because a bucket is not provisioned",
		Who:     WhoNobody,
		Action:  "wait for the BucketClaim; kubectl cosi status claim NAME says why it is not provisioned",
	},
	cosiapi.EventFailedGrantAccess: {
		Meaning: "the access could not be granted (a driver error, a refusal, a Secret in the way)",
		Who:     WhoDriverOwner,
		Action:  "read the message; it names the cause and who can fix it",
	},
	cosiapi.ReasonRotating: {
		Meaning: "a credential rotation asked for by an admin (or the class's rotation period) is in progress",
		Who:     WhoNobody,
		Action:  "wait; the old credential keeps working until the grace period after the Secrets hold the new one",
	},
	cosiapi.ReasonRotated: {
		Meaning: "the Secrets hold the new credential and the old one was retired",
		Who:     WhoNobody,
		Action:  "nothing; workloads that re-read their Secret use the new credential",
	},
	cosiapi.ReasonRotationUnsupported: {
		Meaning: "the driver cannot rotate credentials (it answered Unimplemented); the credentials keep working",
		Who:     WhoAdmin,
		Action:  "remove the rotation request, or recreate the access to get new credentials",
	},
	cosiapi.ReasonRotationFailed: {
		Meaning: "the driver refused the rotation with an error that retrying cannot fix",
		Who:     WhoDriverOwner,
		Action:  "read the message; fix the backend, then ask again with a new rotate-credentials value",
	},
	cosiapi.ReasonInvalidParameter: {
		Meaning: "a class parameter of COSI's own (objectstorage.k8s.io/...) is unknown or has an invalid value",
		Who:     WhoAdmin,
		Action:  "fix the class parameter the message names (e.g. rotation-period: 720h)",
	},
	cosiapi.EventRotatingCredentials: {
		Meaning: "the sidecar started a credential rotation for the access",
		Who:     WhoNobody,
		Action:  "nothing; a CredentialsRotated event follows once the old credential is retired",
	},
	cosiapi.EventCredentialsRotated: {
		Meaning: "the access's Secrets hold the new credential and the old one was retired",
		Who:     WhoNobody,
		Action:  "nothing",
	},
	cosiapi.EventFailedRotateCredentials: {
		Meaning: "a driver call of a rotation failed; retried unless the error is final",
		Who:     WhoDriverOwner,
		Action:  "read the message; fix the backend",
	},
	cosiapi.EventSecretsRefreshed: {
		Meaning: "the sidecar rewrote the access's Secrets in place because the driver's answer changed",
		Who:     WhoNobody,
		Action:  "nothing; workloads that re-read their Secret get the new endpoint, region or CA",
	},
	cosiapi.EventFailedRefresh: {
		Meaning: "a driver call of a Secret refresh failed; tried again at the next check",
		Who:     WhoDriverOwner,
		Action:  "read the message; the Secrets keep their previous values meanwhile",
	},
	cosiapi.EventFailedUsage: {
		Meaning: "a usage check of the Bucket failed (DriverGetBucketUsage, or writing it to status); " +
			"tried again at the next --usage-interval",
		Who:    WhoDriverOwner,
		Action: "read the message; status.usage and the usage gauges keep the last figures meanwhile",
	},
	cosiapi.EventFailedRevokeAccess: {
		Meaning: "the driver failed to revoke the access",
		Who:     WhoDriverOwner,
		Action:  "fix the backend; the sidecar retries until the revocation succeeds",
	},
	cosiapi.EventUpdateConflict: {
		Meaning: "a write of COSI lost a race with another writer and was retried",
		Who:     WhoNobody,
		Action:  "nothing, unless it repeats for a long time: then look for another writer of the object",
	},
}

// explain returns the explanation of a reason, and false for a reason the table lacks (a newer
// COSI than this plugin).
func explain(reason string) (Explanation, bool) {
	e, ok := Explanations[reason]
	return e, ok
}
