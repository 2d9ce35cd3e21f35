package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// BucketSpec is the desired state of a Bucket. Once created it is immutable, except for
// deletionPolicy and for setting bucketClaimRef.uid once when a static Bucket binds.
// +kubebuilder:validation:XValidation:rule="self.driverName == oldSelf.driverName",fieldPath=".driverName",message="driverName is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.protocols) ? self.protocols : []) == (has(oldSelf.protocols) ? oldSelf.protocols : [])",fieldPath=".protocols",message="protocols is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.parameters) ? self.parameters : {}) == (has(oldSelf.parameters) ? oldSelf.parameters : {})",fieldPath=".parameters",message="parameters is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.existingBucketID) == has(oldSelf.existingBucketID) && (!has(self.existingBucketID) || self.existingBucketID == oldSelf.existingBucketID)",fieldPath=".existingBucketID",message="existingBucketID is immutable"
// KEP-1979 ("Accessing an Existing OSP Bucket"): deleting an imported bucket "should be
// disallowed"; COSI did not create it, so COSI does not delete it, on create and on every update.
// +kubebuilder:validation:XValidation:rule="!has(self.existingBucketID) || self.deletionPolicy == 'Retain'",fieldPath=".deletionPolicy",message="deletionPolicy must be Retain when existingBucketID is set: COSI does not delete buckets it did not create"
type BucketSpec struct {
	// driverName is the name of the COSI driver that manages this bucket, as the driver reports it
	// (domain-name notation, for example "s3.example.com"). Only the sidecar of that driver acts
	// on this Bucket. Immutable.
	// +required
	DriverName DriverName `json:"driverName"`

	// deletionPolicy says what happens when the bound BucketClaim is deleted:
	//  - Retain: keep this Bucket object and the bucket in the object store;
	//  - Delete: delete this Bucket object and the bucket in the object store.
	// This is the one mutable field, so that an admin can switch a bucket to Retain after it was
	// provisioned. An imported (brownfield) Bucket, one with existingBucketID, must be Retain:
	// COSI does not delete data that existed before it.
	// +required
	DeletionPolicy DeletionPolicy `json:"deletionPolicy"`

	// protocols lists the protocols the bucket must support. For a dynamically provisioned
	// Bucket it is copied from the BucketClaim; COSI checks that the driver advertises each one.
	// Immutable.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Protocols []Protocol `json:"protocols,omitempty"`

	// parameters is an opaque map of driver-specific configuration, copied from the BucketClass
	// when the Bucket is dynamically provisioned, or written by an admin for an imported bucket.
	// They are passed to the driver on every call for this bucket. Immutable.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`

	// bucketClaimRef references the BucketClaim this Bucket is bound to. For a dynamically
	// provisioned Bucket COSI sets it, with the claim's UID. For an imported (static) Bucket, the
	// admin sets the namespace and name of the only BucketClaim allowed to bind to it; COSI sets
	// the uid when that claim binds.
	// +required
	BucketClaimRef BucketClaimReference `json:"bucketClaimRef"`

	// existingBucketID is the ID, known to the driver, of a bucket that already exists in the
	// object store. Set it to import (statically provision) that bucket; COSI then checks that it
	// exists instead of creating a bucket. Leave it empty for buckets COSI creates. Immutable.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	ExistingBucketID string `json:"existingBucketID,omitempty"`
}

// BucketClaimReference identifies the BucketClaim a Bucket is bound to.
// +kubebuilder:validation:XValidation:rule="self.name == oldSelf.name",fieldPath=".name",message="name is immutable"
// +kubebuilder:validation:XValidation:rule="self.__namespace__ == oldSelf.__namespace__",fieldPath=".namespace",message="namespace is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.uid) || (has(self.uid) && self.uid == oldSelf.uid)",fieldPath=".uid",message="uid can be set once, when the claim binds, and is then immutable"
type BucketClaimReference struct {
	// name of the BucketClaim. Immutable.
	// +required
	Name ObjectName `json:"name"`

	// namespace of the BucketClaim. Immutable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespace string `json:"namespace"`

	// uid of the BucketClaim. COSI sets it when the claim binds; it cannot change afterwards, so
	// a claim deleted and re-created with the same name does not silently take over the bucket.
	// +optional
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	UID types.UID `json:"uid,omitempty"`
}

// BucketStatus is the observed state of a Bucket, written by the COSI sidecar.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.bucketID) || (has(self.bucketID) && self.bucketID == oldSelf.bucketID)",fieldPath=".bucketID",message="bucketID cannot be changed or removed once set"
type BucketStatus struct {
	// conditions report the state of the bucket: Provisioned, ResourcesValidated and
	// ProvisionFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// bucketID is the unique ID of the bucket in the object store, used in every driver call for
	// this bucket. COSI records it before creating the bucket, so it can always be deleted; once
	// set it cannot change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	BucketID string `json:"bucketID,omitempty"`

	// protocols lists the protocols the provisioned bucket supports, as the driver reported.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Protocols []Protocol `json:"protocols,omitempty"`

	// bucketInfo is the non-sensitive bucket information the driver reported (endpoint, region,
	// bucket name...), keyed like the BucketAccess Secret data, for admins to inspect. It is not
	// copied to the BucketClaim and never holds credentials.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	BucketInfo map[string]string `json:"bucketInfo,omitempty"`

	// usage is what the bucket holds and the limits the object store enforces on it, as the
	// store accounts them, read at intervals by the driver's sidecar from drivers that can say
	// cheaply (a COSI extension: the BUCKET_USAGE capability; KEP-1979 has no usage). Unset for
	// other drivers. Written only when the figures change.
	// +optional
	Usage *BucketUsage `json:"usage,omitempty"`
}

// BucketUsage is a bucket's usage and quota as its object store accounts them.
//
// sizeBytes and objectCount are not pointers, against kubeapilinter's requiredfields: zero is a
// figure (an empty bucket), never omitted (no omitempty), and the sidecar always writes both with
// the rest of the struct, which is itself optional; pointers would only make every reader handle
// a nil that is never written.
type BucketUsage struct {
	// sizeBytes is the bytes the bucket's objects hold, as the store counts them against a
	// quota (Ceph RGW: each object rounded up to 4 KiB).
	// +required
	// +kubebuilder:validation:Minimum=0
	SizeBytes int64 `json:"sizeBytes"` //nolint:kubeapilinter // zero is a figure, never omitted: no pointer

	// objectCount is the number of objects in the bucket.
	// +required
	// +kubebuilder:validation:Minimum=0
	ObjectCount int64 `json:"objectCount"` //nolint:kubeapilinter // zero is a figure, never omitted: no pointer

	// maxSizeBytes is the size limit the store enforces on the bucket; unset: none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxSizeBytes *int64 `json:"maxSizeBytes,omitempty"`

	// maxObjectCount is the object count limit the store enforces; unset: none.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxObjectCount *int64 `json:"maxObjectCount,omitempty"`
}

// Bucket represents one bucket in an object store, the way a PersistentVolume represents a volume.
// COSI creates a Bucket for each dynamically provisioned BucketClaim; an admin creates one to
// import an existing bucket. A Bucket is bound to exactly one BucketClaim.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,categories=cosi;objectstorage
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support"
// +kubebuilder:printcolumn:name="Provisioned",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].status`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driverName`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.deletionPolicy`
// +kubebuilder:printcolumn:name="Claim Namespace",type=string,JSONPath=`.spec.bucketClaimRef.namespace`
// +kubebuilder:printcolumn:name="Claim",type=string,JSONPath=`.spec.bucketClaimRef.name`
// +kubebuilder:printcolumn:name="Bucket ID",type=string,JSONPath=`.status.bucketID`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].reason`,priority=1
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.usage.sizeBytes`,priority=1
// +kubebuilder:printcolumn:name="Objects",type=integer,JSONPath=`.status.usage.objectCount`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="has(self.status) || !has(oldSelf.status) || !has(oldSelf.status.bucketID)",fieldPath=".status.bucketID",message="bucketID cannot be changed or removed once set"
type Bucket struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the Bucket. Immutable, except for deletionPolicy and for
	// bucketClaimRef.uid, which is set once when the claim binds.
	// +required
	Spec BucketSpec `json:"spec"`

	// status is the observed state of the Bucket, written by the COSI sidecar.
	// +optional
	Status BucketStatus `json:"status,omitempty,omitzero"`
}

// BucketList is a list of Buckets.
// +kubebuilder:object:root=true
type BucketList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Bucket `json:"items"`
}
