package v1alpha2

// ObjectName is the name of a Kubernetes object that COSI refers to by name (a BucketClaim,
// BucketClass, BucketAccessClass, Bucket, Secret or ServiceAccount): a DNS subdomain (RFC 1123),
// as the API server requires of those names. Gateway API names the same validation ObjectName.
//
// It is a type alias, not a defined type: the validation is written once and controller-gen
// applies it to every field of this type, while Go code keeps assigning and comparing the fields
// as plain strings (object names are strings everywhere else in Kubernetes' Go API).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
type ObjectName = string

// DriverName is the name of a COSI driver as the driver reports it in DriverGetInfo: domain-name
// notation, for example "s3.example.com", of at most 63 characters (like a CSI driver name).
// A type alias, like ObjectName, so that the validation is written once.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9]([a-zA-Z0-9.-]*[a-zA-Z0-9])?$`
type DriverName = string

// DeletionPolicy says what happens to a Bucket, and to the bucket in the object store, when the
// BucketClaim bound to it is deleted.
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionPolicyRetain keeps the Bucket object and the bucket in the object store when the
	// bound BucketClaim is deleted. The Bucket is left unbound; an admin can re-import it.
	DeletionPolicyRetain DeletionPolicy = "Retain"

	// DeletionPolicyDelete deletes the Bucket object and the bucket in the object store when the
	// bound BucketClaim is deleted.
	DeletionPolicyDelete DeletionPolicy = "Delete"
)

// Protocol is an object storage protocol that a bucket can be accessed with.
// +kubebuilder:validation:Enum=S3;Azure;GCS
type Protocol string

const (
	// ProtocolS3 is the Amazon S3 protocol and its compatibles.
	ProtocolS3 Protocol = "S3"
	// ProtocolAzure is the Azure Blob Storage protocol.
	ProtocolAzure Protocol = "Azure"
	// ProtocolGCS is the Google Cloud Storage protocol.
	ProtocolGCS Protocol = "GCS"
)

// Protocols lists every Protocol, in the order used for display and iteration.
var Protocols = []Protocol{ProtocolS3, ProtocolAzure, ProtocolGCS}

// AuthenticationType is how workloads authenticate to the object store.
// +kubebuilder:validation:Enum=Key;ServiceAccount
type AuthenticationType string

const (
	// AuthenticationTypeKey means workloads authenticate explicitly with keys or tokens that COSI
	// writes into the BucketAccess Secret.
	AuthenticationTypeKey AuthenticationType = "Key"

	// AuthenticationTypeServiceAccount means workloads authenticate implicitly through a mapping,
	// configured by the driver, from a Kubernetes ServiceAccount to an object store identity.
	AuthenticationTypeServiceAccount AuthenticationType = "ServiceAccount"
)

// MultiBucketAccess says whether one BucketAccess may reference several BucketClaims.
// +kubebuilder:validation:Enum=SingleBucket;MultipleBuckets
type MultiBucketAccess string

const (
	// MultiBucketAccessSingleBucket allows a BucketAccess to reference exactly one BucketClaim.
	// This is what COSI does when a BucketAccessClass has no opinion.
	MultiBucketAccessSingleBucket MultiBucketAccess = "SingleBucket"

	// MultiBucketAccessMultipleBuckets allows a BucketAccess to reference one or more
	// BucketClaims, all served by one set of credentials.
	MultiBucketAccessMultipleBuckets MultiBucketAccess = "MultipleBuckets"
)

// BucketAccessMode is the read/write mode a BucketAccess asks for in one category of a bucket's
// data (object data, object metadata or bucket metadata).
// +kubebuilder:validation:Enum=ReadWrite;ReadOnly;WriteOnly
type BucketAccessMode string

const (
	// BucketAccessModeReadWrite allows both reads and writes.
	BucketAccessModeReadWrite BucketAccessMode = "ReadWrite"
	// BucketAccessModeReadOnly allows reads only; writes must be denied.
	BucketAccessModeReadOnly BucketAccessMode = "ReadOnly"
	// BucketAccessModeWriteOnly allows writes only; reads must be denied.
	BucketAccessModeWriteOnly BucketAccessMode = "WriteOnly"
)
