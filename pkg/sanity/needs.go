package sanity

import "strings"

// Needs are what a case needs beyond a driver socket, as Case.Needs lists them.
const (
	NeedProbeBucketExists   = "Probe.BucketExists"
	NeedProbeAccounts       = "Probe.Accounts"
	NeedProbeAllowed        = "Probe.Allowed"
	NeedProbeAccountOf      = "Probe.AccountOf (optional)"
	NeedProbePut            = "Probe.Put"
	NeedProbeEmpty          = "Probe.Empty"
	NeedProbeObjects        = "Probe.Objects (optional)"
	NeedInvalidBucketParams = "InvalidBucketParameters"
	NeedIncompatibleParams  = "IncompatibleBucketParameters"
	NeedInvalidAccessParams = "InvalidAccessParameters"
	NeedIncompatibleAccess  = "IncompatibleAccessParameters"
	NeedDriverLogs          = "DriverLogs"
	NeedUnadvertised        = "a protocol the driver does not advertise"
	NeedMultiBucket         = "multi-bucket access (else skipped on OutOfRange)"
	NeedServiceAccount      = "ServiceAccount authentication (else skipped on InvalidArgument)"
	NeedUsage               = "the BUCKET_USAGE capability (COSI's usage extension)"
)

// need is what one case needs, and what the suite cannot see without it.
type need struct {
	what  []string
	blind string
}

// caseNeeds lists the cases that need more than a socket. TestSkipsWithoutProbe checks it against
// what the cases do.
var caseNeeds = map[string]need{
	"DriverGenerateBucketId/creates nothing in the backend": {
		[]string{NeedProbeBucketExists}, "a bucket created in phase 1, which leaks when COSI never persists its ID"},
	"DriverGenerateBucketId/rejects invalid parameters with InvalidArgument": {
		[]string{NeedInvalidBucketParams}, "parameter values accepted without validation"},
	"DriverGenerateBucketId/returns AlreadyExists for an existing bucket with incompatible parameters": {
		[]string{NeedIncompatibleParams}, "a bucket re-used although its parameters differ"},
	"DriverCreateBucket/creates the bucket in the backend": {
		[]string{NeedProbeBucketExists}, "a driver that reports success without creating the bucket"},
	"DriverCreateBucket/rejects invalid parameters with InvalidArgument": {
		[]string{NeedInvalidBucketParams}, "parameter values accepted without validation"},
	"DriverCreateBucket/returns AlreadyExists for an existing bucket with incompatible parameters": {
		[]string{NeedIncompatibleParams}, "a bucket re-used although its parameters differ"},
	"DriverCreateBucket/rejects a protocol the driver does not advertise with InvalidArgument": {
		[]string{NeedUnadvertised}, "nothing: a driver that supports every protocol has none to refuse"},
	"DriverGetBucket/returns AlreadyExists for a bucket incompatible with the parameters": {
		[]string{NeedIncompatibleParams}, "a bucket imported whatever the parameters say"},
	"DriverDeleteBucket/deletes the bucket in the backend": {
		[]string{NeedProbeBucketExists}, "a driver that forgets the bucket but leaves it in the backend"},
	"DriverDeleteBucket/deletes a bucket holding objects with them, or refuses with FailedPrecondition": {
		[]string{NeedProbeBucketExists, NeedProbePut, NeedProbeEmpty, NeedProbeObjects},
		"a driver that answers OK and keeps a bucket holding objects, or that deletes some of them and refuses"},
	"DriverGenerateBucketAccessId/creates no account in the backend": {
		[]string{NeedProbeAccounts}, "an account created in phase 1, which leaks"},
	"DriverGrantBucketAccess/is idempotent for the same account_id": {
		[]string{NeedProbeAllowed}, "(only when a repeat returns other credentials) whether both keys work"},
	"DriverGrantBucketAccess/creates one backend account however often it is called": {
		[]string{NeedProbeAccounts}, "a new backend user per call"},
	"DriverGrantBucketAccess/enforces each granted access mode": {
		[]string{NeedProbeAllowed}, "a read-only key that can write, or any mode not enforced"},
	"DriverGrantBucketAccess/gives multiple buckets one credential, or returns OutOfRange": {
		[]string{NeedProbeAllowed}, "a shared credential that does not open every bucket"},
	"DriverGrantBucketAccess/gives each bucket of a multi-bucket grant its own access modes": {
		[]string{NeedProbeAllowed, NeedMultiBucket}, "one bucket's modes applied to all (a read-only bucket written)"},
	"DriverGrantBucketAccess/gives each access its own credentials": {
		[]string{NeedProbeAccountOf}, "two different keys that authenticate as one shared backend account"},
	"DriverGrantBucketAccess/leaves other accesses to the same bucket working": {
		[]string{NeedProbeAllowed}, "a grant or revoke that breaks another access to the same bucket"},
	"DriverGrantBucketAccess/gives no access to buckets outside the grant": {
		[]string{NeedProbeAllowed}, "a key that opens buckets it was not granted"},
	"DriverGrantBucketAccess/serves ServiceAccount grants through the ServiceAccount, not a key": {
		[]string{NeedProbeAllowed, NeedServiceAccount},
		"a ServiceAccount grant that maps no backend identity (a key served instead is seen without a probe)"},
	"DriverGrantBucketAccess/maps only the granted ServiceAccount": {
		[]string{NeedProbeAllowed, NeedServiceAccount},
		"a ServiceAccount grant that other ServiceAccounts (of the namespace, or of the name elsewhere) can use"},
	"DriverGrantBucketAccess/rejects a protocol the driver does not advertise with InvalidArgument": {
		[]string{NeedUnadvertised}, "nothing: a driver that supports every protocol has none to refuse"},
	"DriverGrantBucketAccess/returns AlreadyExists for a repeat grant with other access parameters": {
		[]string{NeedIncompatibleAccess}, "an existing account answered as if a grant with other parameters were the same"},
	"DriverGrantBucketAccess/rejects invalid parameters with InvalidArgument": {
		[]string{NeedInvalidAccessParams}, "parameter values accepted without validation"},
	"DriverRevokeBucketAccess/revokes the credentials": {
		[]string{NeedProbeAllowed}, "a revoke that leaves the key working"},
	"DriverRevokeBucketAccess/leaves no account and no access of any category": {
		[]string{NeedProbeAllowed, NeedProbeAccounts, NeedProbeAccountOf},
		"an account left behind, or metadata access that outlives the revoke"},
	"DriverRevokeBucketAccess/revokes every bucket of a multi-bucket access": {
		[]string{NeedProbeAllowed, NeedMultiBucket, NeedProbeAccountOf},
		"a multi-bucket revoke that leaves access to some of the buckets"},
	"DriverRevokeBucketAccess/ends a ServiceAccount's access": {
		[]string{NeedProbeAllowed, NeedServiceAccount}, "a revoke that leaves the ServiceAccount's access working"},
	"Secrets/the driver logs no credential": {
		[]string{NeedDriverLogs}, "credentials in the driver's log"},
	"DriverRotateBucketAccessCredentials/returns a new working credential; the old one keeps working": {
		[]string{NeedProbeAllowed}, "a new key that does not work, or an old key revoked at once (no grace for Pods)"},
	"DriverRotateBucketAccessCredentials/is idempotent for the same credential_id": {
		[]string{NeedProbeAllowed}, "a retried rotation that leaves an extra key working"},
	"DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one": {
		[]string{NeedProbeAllowed}, "a retired key that keeps working, or a retire that breaks the new key"},
	caseUsageEmpty: {
		[]string{NeedUsage}, "nothing: COSI asks a driver for usage only when it advertises it"},
	caseUsageCounts: {
		[]string{NeedUsage, NeedProbePut}, "usage that does not follow what the bucket holds"},
	caseUsageMissing: {
		[]string{NeedUsage}, "nothing: COSI asks a driver for usage only when it advertises it"},
}

// Needs lists what the case needs beyond a driver socket: probe functions, parameters, logs or
// backend features. A case whose need is missing is skipped with the reason, never passed.
func (c Case) Needs() []string { return c.need().what }

// Blind says what the suite cannot see when the case is skipped for want of its needs; empty
// for a case that needs nothing.
func (c Case) Blind() string { return c.need().blind }

func (c Case) need() need {
	if strings.HasPrefix(c.Name, "Sequences/") {
		return need{[]string{NeedProbeAllowed},
			"bugs that only show in some orders of operations, or with names that extend one another"}
	}
	return caseNeeds[c.Name]
}
