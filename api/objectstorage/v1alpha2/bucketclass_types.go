package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BucketClassSpec configures how new buckets are provisioned. Immutable, like a StorageClass:
// create a new class to change the configuration. Buckets keep a copy of what they were created
// with, so changing or deleting a class never affects existing buckets.
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable; create a new BucketClass instead"
type BucketClassSpec struct {
	// driverName is the name of the COSI driver that provisions buckets of this class, as the
	// driver reports it (domain-name notation, for example "s3.example.com").
	// +required
	DriverName DriverName `json:"driverName"`

	// deletionPolicy says what happens when a BucketClaim of this class is deleted:
	//  - Retain: keep the Bucket object and the bucket in the object store;
	//  - Delete: delete the Bucket object and the bucket in the object store.
	// There is no default: choose explicitly.
	// +required
	DeletionPolicy DeletionPolicy `json:"deletionPolicy"`

	// parameters is an opaque map of driver-specific configuration for creating buckets (the
	// driver documents its keys). It is copied to each Bucket when it is provisioned.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BucketClass is an admin's configuration for provisioning new buckets with one driver, the way a
// StorageClass configures volumes. Users name it in BucketClaims.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=cosi;objectstorage
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support"
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driverName`
// +kubebuilder:printcolumn:name="Policy",type=string,JSONPath=`.spec.deletionPolicy`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BucketClass struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec configures the buckets of this class. It is immutable, like a StorageClass: create a new
	// class to change it. Buckets keep a copy, so changing classes never affects existing buckets.
	// +required
	Spec BucketClassSpec `json:"spec"`
}

// BucketClassList is a list of BucketClasses.
// +kubebuilder:object:root=true
type BucketClassList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BucketClass `json:"items"`
}
