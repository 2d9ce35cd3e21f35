package v1alpha2

// This file is the one place that names every annotation, finalizer, condition, event reason and
// Secret data key of COSI (KEP-1979 v1alpha2, "Annotations and finalizers", "Conditions" and
// "BucketAccess Secret data"). Each entry says who sets it, who clears it, and when.
//
// The KEP writes some keys as "objectstorage.k8.io/..."; that is a typo for the group name
// objectstorage.k8s.io, which every key here uses (a test checks the prefix).

// Annotations.
const (
	// AnnotationBucketClaimBeingDeleted is set on a Bucket by the COSI Controller when the
	// BucketClaim bound to the Bucket is being deleted. It tells the Sidecar that it is safe to
	// unbind and, with deletion policy Delete, to deprovision the bucket. It is never cleared: the
	// Bucket is either deleted or left retained and unbound. An admin deleting a Bucket whose claim
	// is not being deleted does not trigger deprovisioning until this annotation appears. The
	// cosi-reserved-bucket-metadata admission policy (config/admission) reserves it to the
	// Controller.
	AnnotationBucketClaimBeingDeleted = "objectstorage.k8s.io/bucketclaim-being-deleted"

	// AnnotationBucketNotCreated is set on a dynamically provisioned Bucket by the Sidecar when the
	// driver answers its DriverCreateBucket ALREADY_EXISTS: a bucket by the Bucket's ID exists in
	// the backend, and this Bucket did not create it (not with its parameters; with a COSI v1alpha1
	// driver, possibly another account's bucket of the same name). Its value is when the answer
	// came. While it is set and the Bucket is not provisioned, deleting the Bucket with the Delete
	// policy does not ask the driver to delete that bucket, which may hold someone else's data:
	// the Bucket goes, the backend bucket stays, and a Warning event (EventBucketNotDeleted) says
	// so. The Sidecar removes it once a creation succeeds.
	AnnotationBucketNotCreated = "objectstorage.k8s.io/bucket-not-created"

	// AnnotationHasBucketAccessReferences is set on a BucketClaim by the COSI Controller while one
	// or more BucketAccesses reference the claim, and removed by the Controller when the last of
	// them is deleted. The Controller re-derives it from the BucketAccesses on every reconcile and
	// puts it back when someone removes it. It is COSI's published view: the claim's deletion waits
	// for the accesses handed off to the Sidecar, decided from the accesses themselves, never from
	// the annotation (an access that was refused does not block it).
	AnnotationHasBucketAccessReferences = "objectstorage.k8s.io/has-bucketaccess-references"

	// AnnotationSidecarCleanupFinished is set on a deleting BucketAccess by the Sidecar once it has
	// deleted the access Secrets and revoked the access in the driver. The Controller then removes
	// the BucketAccess finalizer, and the claims lose their reference annotation once no other
	// access references them. It is not cleared; the object goes away. A tenant can write it, so
	// neither component trusts it alone: the Sidecar records the revocation in status too (the
	// Provisioned condition with ReasonRevoked), and the Controller waits for both.
	AnnotationSidecarCleanupFinished = "objectstorage.k8s.io/sidecar-cleanup-finished"

	// AnnotationBucketAccessReference is set by the Sidecar on each BucketAccess Secret, with the
	// value "<namespace>/<name>" of the BucketAccess. Informational only: it helps users
	// cross-reference a Secret; COSI never reads it.
	AnnotationBucketAccessReference = "objectstorage.k8s.io/bucketaccess-reference"

	// AnnotationBucketClaimReference is set by the Sidecar on each BucketAccess Secret, with the
	// value "<namespace>/<name>" of the BucketClaim the Secret gives access to. Informational only.
	AnnotationBucketClaimReference = "objectstorage.k8s.io/bucketclaim-reference"

	// AnnotationSecretDataKeys is set by the Sidecar on each BucketAccess Secret: the
	// comma-separated data keys it wrote (names only, never values). At each Secret check, a Secret
	// that lacks one of them is written again, with one more grant. A tenant who edits it only
	// changes what the check looks for.
	AnnotationSecretDataKeys = "objectstorage.k8s.io/secret-data-keys"

	// AnnotationSecretCheckInterval is set by the Sidecar on each BucketAccess Secret it writes: its
	// --secret-check-interval at that write, as a Go duration ("10m0s"). A Secret that someone
	// deletes is kept by FinalizerProtection until the Sidecar's next check of the access's
	// Secrets, which is at most this long after the deletion (the Sidecar may not watch Secrets).
	// Informational: kubectl cosi reads it to say when a deleted Secret is written again (and
	// doctor when it is stuck); COSI never reads it. Tenants may not change it
	// (cosi-reserved-secrets), as every objectstorage.k8s.io/ annotation of the Secret.
	AnnotationSecretCheckInterval = "objectstorage.k8s.io/secret-check-interval"

	// AnnotationAllowedBucketClasses is set on a Namespace by an admin: the comma-separated names
	// of the BucketClasses that BucketClaims of the namespace may use. Enforced when a claim is
	// created, by the cosi-allowed-classes ValidatingAdmissionPolicy (config/admission); no
	// annotation or "*" among the names: no limit; an empty value: no class. COSI's components
	// never read it.
	AnnotationAllowedBucketClasses = "objectstorage.k8s.io/allowed-bucket-classes"

	// AnnotationAllowedBucketAccessClasses is set on a Namespace by an admin: the comma-separated
	// names of the BucketAccessClasses that BucketAccesses of the namespace may use (same policy
	// and rules).
	AnnotationAllowedBucketAccessClasses = "objectstorage.k8s.io/allowed-bucket-access-classes"

	// AnnotationRotateCredentials is set on a BucketAccess by an admin to ask for new credentials
	// (a COSI extension; docs/sidecar.md, "Credential rotation"): each new value asks for one
	// rotation. The Sidecar has the driver issue a new credential
	// (DriverRotateBucketAccessCredentials), writes it into the access's Secrets, and retires the
	// old one after the grace period (--rotation-grace-period). It records the last value handled
	// in the access's grant record, where tenants cannot write, and never clears the annotation.
	// The cosi-reserved-access-annotations admission policy (config/admission) reserves it to
	// admins: tenants may write their BucketAccesses' other annotations.
	AnnotationRotateCredentials = "objectstorage.k8s.io/rotate-credentials"

	// AnnotationCredentialID is set by the Sidecar on each BucketAccess Secret: the credential_id
	// of the credential the Secret holds, as the driver named it (not secret; for S3 on IAM, the
	// access key ID). A rotation interrupted by a restart is finished from it: a Secret that
	// already holds the new credential gives it to the others. A tenant who edits it can only
	// mislead the rotation of their own access; the credential to retire comes from the grant
	// record.
	AnnotationCredentialID = "objectstorage.k8s.io/credential-id"

	// AnnotationRefreshSecret is set on a BucketAccess by an admin to have the Sidecar rewrite the
	// access's Secrets from the driver's current answer now (a COSI extension; docs/sidecar.md,
	// "Secret refresh"): each new value asks for one refresh. The Sidecar asks the driver again for
	// the access's Buckets (DriverGetBucket) and for the access (DriverGrantBucketAccess), and
	// rewrites, in place, the Secrets whose data changed (endpoint, region, CA, SAS expiry; with the
	// credentials the driver returns). It records the last value handled in the access's grant
	// record and never clears the annotation. The cosi-reserved-metadata admission policy
	// (config/admission) reserves it to admins: a refresh costs a grant, which on some drivers
	// issues a key.
	AnnotationRefreshSecret = "objectstorage.k8s.io/refresh-secret"
)

// Class parameters that are COSI's own (COSI extensions). BucketClass and BucketAccessClass
// parameters are opaque to COSI (KEP-1979) except for keys under the group name, which are
// reserved: the Sidecar keeps one registry of them, each with its owner (the Sidecar, for those
// below; the v1alpha1 adapter, for pkg/driver/v1alpha1's, such as
// objectstorage.k8s.io/v1alpha1-access-modes), refuses unknown ones, ones on the wrong kind of class
// and invalid values (ResourcesValidated False, ReasonInvalidParameter, naming the key), and passes
// none to the driver, which would reject keys it does not know: the adapter's reach the adapter,
// which removes them before calling a v1alpha1 driver.
const (
	// ParameterRotationPeriod (BucketAccessClass) rotates the credentials of the class's accesses
	// periodically: a Go duration ("720h"), greater than zero. The Sidecar rotates an access's
	// credentials (as AnnotationRotateCredentials does) once this long has passed since its
	// Secrets were written with the current credential, or since the last rotation that could not
	// be done. Read from BucketAccess status.parameters, which the Controller copies from the class
	// when it hands the access off: it applies to accesses created after it was set.
	ParameterRotationPeriod = "objectstorage.k8s.io/rotation-period"
	// ParameterRefreshBucketInfo (BucketClass) has the Sidecar ask the driver for the information
	// of the class's dynamically provisioned Buckets again at intervals (DriverGetBucket), and
	// carry a change into their accesses' Secrets: "true" or "false" (the default). KEP-1979 says
	// DriverGetBucket "does not apply to dynamically-provisioned Buckets": this is the opt-in for
	// drivers that answer it for them. Imported Buckets (existingBucketID) are refreshed whatever
	// it says. Read from Bucket spec.parameters, which the Controller copies from the class.
	ParameterRefreshBucketInfo = "objectstorage.k8s.io/refresh-bucket-info"
)

// Finalizers.
const (
	// FinalizerProtection keeps an object until COSI has cleaned up what it stands for.
	//   - BucketClaim: added and removed by the Controller (removed after the Bucket is handled).
	//   - Bucket: added and removed by the Sidecar: added before its first driver call (the
	//     Controller creates Buckets without it, so that a Bucket no sidecar serves can be
	//     deleted), removed after the driver deleted the bucket, or at once when the policy is
	//     Retain.
	//   - BucketAccess: added by the Controller (and by the Sidecar if missing); removed by the
	//     Controller after the Sidecar set AnnotationSidecarCleanupFinished.
	//   - BucketAccess Secrets: added and removed by the Sidecar.
	FinalizerProtection = "objectstorage.k8s.io/protection"
)

// Condition types, used in the status of Bucket, BucketClaim and BucketAccess.
const (
	// ConditionProvisioned says whether the backend resource (bucket or access) was provisioned.
	// Unknown at first and while retrying; True once the driver returned OK; False only when COSI
	// determined that the resource cannot be provisioned or is permanently lost. It does not go
	// from True to another status because of a transient RPC failure.
	ConditionProvisioned = "Provisioned"

	// ConditionResourcesValidated says whether the Kubernetes object and the objects it references
	// are valid. Unknown while waiting for references to exist; True when valid; False when they
	// are invalid or become degraded (for example a referenced object goes missing).
	ConditionResourcesValidated = "ResourcesValidated"

	// ConditionProvisionFailed records the result of the latest provisioning RPC: False when the
	// driver returned OK, True with the driver's message when it did not.
	ConditionProvisionFailed = "ProvisionFailed"

	// ConditionCredentialsRotated (BucketAccess, a COSI extension) says how the latest credential
	// rotation went; absent until one is asked for (AnnotationRotateCredentials). Unknown
	// (ReasonRotating) while it runs, True (ReasonRotated) once the old credential is retired,
	// False when it cannot be done (ReasonRotationUnsupported, ReasonRotationFailed). Set by the
	// Sidecar.
	ConditionCredentialsRotated = "CredentialsRotated"
)

// Condition reasons. KEP-1979 does not name reasons; these are COSI's, stable across releases.
const (
	// ReasonPending (any condition, Unknown): COSI has not determined the condition yet; every
	// condition starts so (KEP-1979 "Conditions": "Unknown initially").
	ReasonPending = "Pending"
	// ReasonProvisioned (Provisioned=True): the driver provisioned the resource.
	ReasonProvisioned = "Provisioned"
	// ReasonImportedUnverified (Provisioned=True, on a static Bucket and, mirrored by the Controller,
	// its BucketClaim): the Sidecar imported Bucket.spec.existingBucketID without the backend being
	// asked whether that bucket exists, because the driver speaks COSI v1alpha1, which has no call
	// to look a bucket up (docs/v1alpha1-drivers.md). A wrong ID shows at the first grant, as the
	// driver's error on the BucketAccess. Set by the Sidecar when it imports the Bucket.
	ReasonImportedUnverified = "ImportedUnverified"
	// ReasonProvisioning (Provisioned=Unknown): provisioning is in progress or being retried.
	ReasonProvisioning = "Provisioning"
	// ReasonProvisioningFailed (Provisioned=False): provisioning failed with a final error.
	ReasonProvisioningFailed = "ProvisioningFailed"
	// ReasonRevoked (Provisioned=False, on a deleting BucketAccess): the Sidecar deleted the
	// access Secrets and the driver revoked the access. Together with
	// AnnotationSidecarCleanupFinished it lets the Controller remove the finalizer; the condition
	// is what the Controller trusts, because a tenant can write the annotation but not the status.
	ReasonRevoked = "Revoked"
	// ReasonDeleting (Provisioned): the resource is being deprovisioned. Set by the Controller on a
	// deleting BucketClaim while it waits for its Delete-policy Bucket to be gone; the status stays
	// what it was.
	ReasonDeleting = "Deleting"
	// ReasonDeletionBlocked (Provisioned): deletion waits for something, named in the message (for
	// example a BucketClaim that BucketAccesses handed off to the Sidecar still use; set by the
	// Controller, keeping the condition's status). Set by the Sidecar on a deleting Bucket too.
	ReasonDeletionBlocked = "DeletionBlocked"

	// ReasonValid (ResourcesValidated=True): the object and its references are valid.
	ReasonValid = "Valid"
	// ReasonWaitingForResources (ResourcesValidated=Unknown): a referenced object does not exist
	// yet or is not ready; COSI watches it and continues when it changes.
	ReasonWaitingForResources = "WaitingForResources"
	// ReasonWaitingForDriver (Provisioned=Unknown, on a BucketClaim or a BucketAccess): no sidecar
	// has picked up the claim's Bucket, or acted on the access since its hand-off, and no sidecar
	// holds the leader election Lease of the driver (in the controller's namespace), for longer
	// than a grace period after the Bucket or the access was created: the class names a driver
	// that is not deployed, is down, or is misspelt. Set by the Controller, which looks again every
	// 30 seconds and as soon as a sidecar reports on the Bucket; it is replaced by what the sidecar
	// reports. Not set when the Lease cannot be read. Sidecars deployed without leader election
	// hold no Lease: a Bucket they have not acted on within the grace period is reported as
	// waiting for a driver too, until they act; an access only when its driver's Lease exists and
	// is not held (a sidecar with leader election stopped), since its Buckets' sidecar ran.
	ReasonWaitingForDriver = "WaitingForDriver"
	// ReasonInvalidReference (ResourcesValidated=False): a referenced object is invalid, missing
	// after provisioning, bound elsewhere, or being deleted. The Controller also writes it on a
	// BucketAccess that was not handed off when a claim it names starts deleting (the claim's
	// deletion fences the access, so that it is never handed off).
	ReasonInvalidReference = "InvalidReference"
	// ReasonForbiddenByClass (ResourcesValidated=False): the request asks for something its class
	// forbids (multi-bucket access, a disallowed access mode, an authentication requirement).
	ReasonForbiddenByClass = "ForbiddenByClass"
	// ReasonUnsupportedProtocol (ResourcesValidated=False): a requested protocol is not supported
	// by the driver or the bucket.
	ReasonUnsupportedProtocol = "UnsupportedProtocol"
	// ReasonSecretConflict (ResourcesValidated=False): an access Secret exists and is not owned by
	// the BucketAccess, so COSI will not overwrite it.
	ReasonSecretConflict = "SecretConflict"
	// ReasonSecretWriteFailed (ResourcesValidated=False, on a BucketAccess): the Sidecar has the
	// driver's answer but cannot write an access Secret (a ResourceQuota, a policy, a server
	// error, a Secret someone made unwritable); the message names the Secret and the API server's
	// error. The Sidecar retries the write with the answer it has, never with a new grant, and sets
	// ResourcesValidated True once the Secrets are written.
	ReasonSecretWriteFailed = "SecretWriteFailed"

	// ReasonRotating (CredentialsRotated=Unknown): a rotation is in progress; the message says at
	// which step (asking the driver, writing the Secrets, waiting for the grace period to retire
	// the old credential).
	ReasonRotating = "Rotating"
	// ReasonRotated (CredentialsRotated=True): the Secrets hold the new credential and the old one
	// is retired.
	ReasonRotated = "Rotated"
	// ReasonRotationUnsupported (CredentialsRotated=False): the driver cannot rotate credentials
	// (it answered UNIMPLEMENTED, as v1alpha1 drivers do, or named no credential_id when it
	// granted). The Sidecar does not ask again until the next request (a new
	// AnnotationRotateCredentials value); the credentials keep working.
	ReasonRotationUnsupported = "RotationUnsupported"
	// ReasonRotationFailed (CredentialsRotated=False): the driver refused the rotation with a
	// final error, named in the message; the old credential keeps working.
	ReasonRotationFailed = "RotationFailed"
	// ReasonInvalidParameter (ResourcesValidated=False before a grant or bucket creation;
	// CredentialsRotated=False on an access granted before): a class parameter of COSI's own
	// (ParameterRotationPeriod, any key under the group name) is unknown or has an invalid value,
	// named in the message. Nothing is granted or created until the object changes.
	ReasonInvalidParameter = "InvalidParameter"

	// ReasonDriverSucceeded (ProvisionFailed=False): the latest provisioning RPC returned OK.
	ReasonDriverSucceeded = "DriverSucceeded"
	// ReasonDriverError (ProvisionFailed=True): the latest provisioning RPC failed; the message
	// carries the gRPC code and the driver's message.
	ReasonDriverError = "DriverError"
)

// Event reasons (KEP-1979 "Monitoring Requirements"). Failures are recorded as Warning events on
// the object, in addition to its conditions.
const (
	// EventFailedCreateBucket: the driver failed to create (or, for a static Bucket, find) a bucket.
	EventFailedCreateBucket = "FailedCreateBucket"
	// EventFailedDeleteBucket: the driver failed to delete a bucket. Recorded by the Sidecar on the
	// Bucket and, while the claim waits for its Bucket, by the Controller on the BucketClaim.
	EventFailedDeleteBucket = "FailedDeleteBucket"
	// EventBucketNotDeleted (Warning, on a Bucket): the Bucket was deleted with the Delete policy,
	// but the backend bucket of its ID was not, since the driver had answered its creation
	// ALREADY_EXISTS (AnnotationBucketNotCreated): this Bucket never created it.
	EventBucketNotDeleted = "BucketNotDeleted"
	// EventWaitingForBucket: access cannot be granted yet because a bucket is not provisioned.
	EventWaitingForBucket = "WaitingForBucket"
	// EventWaitingForClass (Normal): the BucketClass of a BucketClaim, or the BucketAccessClass of
	// a BucketAccess, does not exist; the object waits for it (ResourcesValidated Unknown,
	// WaitingForResources). Recorded by the Controller when the wait starts.
	EventWaitingForClass = "WaitingForClass"
	// EventWaitingForDriver (Warning): no sidecar serves the driver of the claim's Bucket, or of a
	// handed-off access (ReasonWaitingForDriver). Recorded by the Controller on the BucketClaim or
	// the BucketAccess when the wait starts.
	EventWaitingForDriver = "WaitingForDriver"
	// EventFailedGrantAccess: the driver failed to grant access.
	EventFailedGrantAccess = "FailedGrantAccess"
	// EventFailedRevokeAccess: the driver failed to revoke access.
	EventFailedRevokeAccess = "FailedRevokeAccess"
	// EventDriverAccountMayHaveLeaked (Warning, on a BucketAccess): a COSI v1alpha1 driver that
	// names its accounts itself answered a grant with a new account after an earlier grant of the
	// access whose answer may have been lost (the sidecar stopped, or the call timed out); an
	// account that grant made is known only to the driver, and COSI cannot revoke it. The message
	// names the buckets, the time since when, and the accounts COSI knows.
	EventDriverAccountMayHaveLeaked = "DriverAccountMayHaveLeaked"
	// EventRotatingCredentials (Normal): the Sidecar started a credential rotation for the access.
	EventRotatingCredentials = "RotatingCredentials"
	// EventCredentialsRotated (Normal): the access's Secrets hold the new credential and the old
	// one is retired.
	EventCredentialsRotated = "CredentialsRotated"
	// EventRotationUnsupported (Warning): the driver cannot rotate the access's credentials.
	EventRotationUnsupported = "RotationUnsupported"
	// EventFailedRotateCredentials (Warning): a driver call of a rotation failed; retried unless
	// the condition says it is final.
	EventFailedRotateCredentials = "FailedRotateCredentials"
	// EventSecretsRefreshed (Normal, on a BucketAccess): the Sidecar rewrote the access's Secrets
	// in place because the driver's answer changed (AnnotationRefreshSecret, or a Bucket's info at
	// a Secret check); the message names the Secrets and the data keys that changed, never values
	// of credential keys.
	EventSecretsRefreshed = "SecretsRefreshed"
	// EventFailedRefresh (Warning): a driver call of a Secret refresh failed (DriverGetBucket at a
	// Bucket's check, on the Bucket; DriverGrantBucketAccess for AnnotationRefreshSecret, on the
	// access). The Secrets keep what they hold; retried at the next check, or with backoff.
	EventFailedRefresh = "FailedRefresh"
	// EventFailedUsage (Warning, on a Bucket): DriverGetBucketUsage failed at a usage check (a COSI
	// extension, drivers with the BUCKET_USAGE capability). The Bucket's status keeps the usage it
	// holds; retried at the next check.
	EventFailedUsage = "FailedUsage"
	// EventUpdateConflict (Normal): a write of the Controller or the Sidecar was refused because
	// another writer changed the object since it was read (HTTP 409), so the object's work is
	// retried (KEP-1979 "Conditions": update conflicts are Kubernetes API issues reported as
	// Events). Recorded on that object at most once a minute, with the number of conflicts since
	// the previous report.
	EventUpdateConflict = "UpdateConflict"
)

// Keys of the data in a BucketAccess Secret (KEP-1979 "BucketAccess Secret data"). Bucket info keys
// are not sensitive; credential keys are, and COSI never logs their values.
const (
	// SecretKeyProtocol (bucket info, all protocols): the protocol, one of S3, Azure, GCS.
	SecretKeyProtocol = "COSI_PROTOCOL"
	// SecretKeyCertificateAuthority (credential info, optional, all protocols): PEM certificate
	// authority that clients can use to verify the object store endpoint.
	SecretKeyCertificateAuthority = "COSI_CERTIFICATE_AUTHORITY"

	// SecretKeyS3EndpointURL (S3 bucket info): endpoint URL, for example https://s3.amazonaws.com.
	SecretKeyS3EndpointURL = "AWS_ENDPOINT_URL"
	// SecretKeyS3BucketName (S3 bucket info): the client-facing bucket name.
	SecretKeyS3BucketName = "BUCKET_NAME"
	// SecretKeyS3Region (S3 bucket info): region, for example us-west-1.
	SecretKeyS3Region = "AWS_DEFAULT_REGION"
	// SecretKeyS3AddressingStyle (S3 bucket info): "path" or "virtual".
	SecretKeyS3AddressingStyle = "AWS_S3_ADDRESSING_STYLE"
	// SecretKeyS3AccessKeyID (S3 credential info): access key ID.
	SecretKeyS3AccessKeyID = "AWS_ACCESS_KEY_ID"
	// SecretKeyS3SecretAccessKey (S3 credential info): secret access key.
	SecretKeyS3SecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	// SecretKeyS3RoleARN (S3 credential info, ServiceAccount authentication): the role that a
	// workload running as the ServiceAccount assumes with its projected token, through the AWS
	// SDKs' web identity credential chain. The KEP names no key for it; this is the SDKs' own.
	SecretKeyS3RoleARN = "AWS_ROLE_ARN"
	// SecretKeyS3WebIdentityTokenFile (S3 credential info, ServiceAccount authentication, optional):
	// the path where the workload's Pod mounts its projected ServiceAccount token (the AWS SDKs'
	// AWS_WEB_IDENTITY_TOKEN_FILE).
	SecretKeyS3WebIdentityTokenFile = "AWS_WEB_IDENTITY_TOKEN_FILE"
	// SecretKeyS3STSEndpointURL (S3 credential info, ServiceAccount authentication, optional): the
	// STS endpoint the token is exchanged at, for stores other than AWS (the AWS SDKs'
	// AWS_ENDPOINT_URL_STS; without it the SDK would send STS calls to AWS_ENDPOINT_URL).
	SecretKeyS3STSEndpointURL = "AWS_ENDPOINT_URL_STS"

	// SecretKeyAzureStorageAccount (Azure bucket info): the storage account ID.
	SecretKeyAzureStorageAccount = "AZURE_STORAGE_ACCOUNT"
	// SecretKeyAzureSASToken (Azure credential info): the SAS token, including the resource URI.
	SecretKeyAzureSASToken = "AZURE_STORAGE_SAS_TOKEN"
	// SecretKeyAzureSASTokenExpiry (Azure credential info): empty when the token does not expire,
	// else its expiry as an ISO 8601 date and time.
	SecretKeyAzureSASTokenExpiry = "AZURE_STORAGE_SAS_TOKEN_EXPIRY_TIMESTAMP"

	// SecretKeyGCSProjectID (GCS bucket info): the project ID.
	SecretKeyGCSProjectID = "PROJECT_ID"
	// SecretKeyGCSBucketName (GCS bucket info): the client-facing bucket name.
	SecretKeyGCSBucketName = "BUCKET_NAME"
	// SecretKeyGCSServiceAccountName (GCS credential info): service account name.
	SecretKeyGCSServiceAccountName = "SERVICE_ACCOUNT_NAME"
	// SecretKeyGCSClientEmail (GCS credential info): service account email.
	SecretKeyGCSClientEmail = "CLIENT_EMAIL"
	// SecretKeyGCSClientID (GCS credential info): client ID.
	SecretKeyGCSClientID = "CLIENT_ID"
	// SecretKeyGCSPrivateKeyID (GCS credential info): private key ID.
	SecretKeyGCSPrivateKeyID = "PRIVATE_KEY_ID"
	// SecretKeyGCSPrivateKey (GCS credential info): private key.
	SecretKeyGCSPrivateKey = "PRIVATE_KEY"
	// SecretKeyGCSHMACAccessID (GCS credential info): HMAC access ID.
	SecretKeyGCSHMACAccessID = "HMAC_ACCESS_ID"
	// SecretKeyGCSHMACSecret (GCS credential info): HMAC secret.
	SecretKeyGCSHMACSecret = "HMAC_SECRET"
)

// Name prefixes that COSI uses to derive stable names from UIDs (KEP-1979 "Creating a Bucket" and
// "DriverGenerateBucketAccessId").
const (
	// BucketNamePrefix prefixes the BucketClaim UID to name a dynamically provisioned Bucket.
	BucketNamePrefix = "bc-"
	// AccountNamePrefix prefixes the BucketAccess UID to form the account_name sent to drivers.
	AccountNamePrefix = "ba-"
)

// CEL and OpenAPI limits shared by several kinds.
const (
	// MaxDriverNameLength is the longest driver name: drivers name themselves in domain-name
	// notation of 63 characters or less (COSI spec, DriverGetInfo).
	MaxDriverNameLength = 63
)

// Labels. KEP-1979 defines none; these are COSI extensions.
const (
	// LabelBucketAccessUID is set by the Sidecar on each BucketAccess Secret, with the UID of the
	// BucketAccess that owns it. The Sidecar watches only Secrets with this label, so it does not
	// cache every Secret of the cluster.
	LabelBucketAccessUID = "objectstorage.k8s.io/bucketaccess-uid"

	// LabelGrantDriver is set by the Sidecar on the grant records it keeps (ConfigMaps named
	// cosi-grant-<BucketAccess UID> in the Sidecar's namespace), with its driver's name (a hash of
	// it when the name is not a valid label value). A record is written before an access is
	// granted and deleted once the grant is revoked; the Sidecar caches only its driver's records.
	// Only COSI and the admins of its namespace can write them (docs/security.md).
	LabelGrantDriver = "objectstorage.k8s.io/grant-driver"
)
