package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DisallowedBucketAccessModes lists, per category, the access modes a BucketAccess of a class may
// not request.
type DisallowedBucketAccessModes struct {
	// objectData lists the disallowed modes for reading and writing objects.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	ObjectData []BucketAccessMode `json:"objectData,omitempty"`

	// objectMetadata lists the disallowed modes for object metadata.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	ObjectMetadata []BucketAccessMode `json:"objectMetadata,omitempty"`

	// bucketMetadata lists the disallowed modes for bucket metadata.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	BucketMetadata []BucketAccessMode `json:"bucketMetadata,omitempty"`
}

// BucketAccessClassSpec configures how access is granted. Immutable, like a StorageClass: create
// a new class to change the configuration. BucketAccesses keep a copy of what they were granted
// with, so changing or deleting a class never affects existing accesses.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable; create a new BucketAccessClass instead"
type BucketAccessClassSpec struct {
	// driverName is the name of the COSI driver that grants accesses of this class, as the driver
	// reports it (domain-name notation, for example "s3.example.com").
	// +required
	DriverName DriverName `json:"driverName"`

	// authenticationType is how workloads authenticate to the object store:
	//  - Key (default): with keys or tokens that COSI writes into the access Secret;
	//  - ServiceAccount: implicitly, as the Kubernetes ServiceAccount named in the BucketAccess,
	//    which the driver maps to an object store identity. BucketAccesses must then set
	//    serviceAccountName.
	// +optional
	// +default="Key"
	AuthenticationType AuthenticationType `json:"authenticationType,omitempty"`

	// parameters is an opaque map of driver-specific configuration for granting access (the driver
	// documents its keys). It is copied to each BucketAccess when it is provisioned.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`

	// multiBucketAccess says whether a BucketAccess of this class may reference more than one
	// BucketClaim:
	//  - SingleBucket: exactly one BucketClaim;
	//  - MultipleBuckets: one or more BucketClaims, sharing one set of credentials.
	// When omitted, COSI chooses, and the choice may change between releases; today it is
	// SingleBucket.
	// +optional
	MultiBucketAccess MultiBucketAccess `json:"multiBucketAccess,omitempty"`

	// disallowedBucketAccessModes lists access modes, per category, that BucketAccesses of this
	// class may not request; COSI rejects such a BucketAccess with a clear condition. It holds for
	// this class only: a user who may name another class of the same driver gets that class's
	// modes. To make a bucket read-only for a namespace, also limit the classes the namespace may
	// use (the cosi-allowed-classes admission policy, docs/security.md).
	// +optional
	DisallowedBucketAccessModes DisallowedBucketAccessModes `json:"disallowedBucketAccessModes,omitempty,omitzero"`
}

// BucketAccessClass is an admin's configuration for granting access to buckets with one driver:
// authentication type, driver parameters, whether one access may span several buckets, and which
// access modes are forbidden. Users name it in BucketAccesses.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=cosi;objectstorage
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support"
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driverName`
// +kubebuilder:printcolumn:name="Authentication",type=string,JSONPath=`.spec.authenticationType`
// +kubebuilder:printcolumn:name="Multi-Bucket",type=string,JSONPath=`.spec.multiBucketAccess`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BucketAccessClass struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the accesses of this class. It is immutable, like a StorageClass: create a new
	// class to change it. BucketAccesses keep a copy, so changing classes never affects them.
	// +required
	Spec BucketAccessClassSpec `json:"spec"`
}

// BucketAccessClassList is a list of BucketAccessClasses.
// +kubebuilder:object:root=true
type BucketAccessClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BucketAccessClass `json:"items"`
}
