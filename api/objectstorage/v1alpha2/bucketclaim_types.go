package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BucketClaimSpec is the desired state of a BucketClaim. Exactly one of bucketClassName (a new
// bucket) and existingBucketName (an imported bucket) is set. Immutable.
// +kubebuilder:validation:XValidation:rule="has(self.bucketClassName) != has(self.existingBucketName)",message="exactly one of bucketClassName or existingBucketName must be set"
// +kubebuilder:validation:XValidation:rule="has(self.bucketClassName) == has(oldSelf.bucketClassName) && (!has(self.bucketClassName) || self.bucketClassName == oldSelf.bucketClassName)",fieldPath=".bucketClassName",message="bucketClassName is immutable"
// +kubebuilder:validation:XValidation:rule="(has(self.protocols) ? self.protocols : []) == (has(oldSelf.protocols) ? oldSelf.protocols : [])",fieldPath=".protocols",message="protocols is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.existingBucketName) == has(oldSelf.existingBucketName) && (!has(self.existingBucketName) || self.existingBucketName == oldSelf.existingBucketName)",fieldPath=".existingBucketName",message="existingBucketName is immutable"
type BucketClaimSpec struct {
	// bucketClassName is the name of the BucketClass to create a new bucket with. Set it to have
	// COSI provision a new bucket; leave it empty when existingBucketName is set. Immutable.
	// +optional
	BucketClassName ObjectName `json:"bucketClassName,omitempty"`

	// protocols lists the protocols the bucket must support (S3, Azure, GCS). COSI checks that the
	// driver advertises each one, and BucketAccesses can only use protocols the bucket supports.
	// When empty, the driver chooses. Immutable.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Protocols []Protocol `json:"protocols,omitempty"`

	// existingBucketName is the name of a Bucket object, created by an admin, that imports a
	// bucket which exists outside COSI. The Bucket must name this claim in its bucketClaimRef,
	// otherwise the claim does not bind. Leave it empty to provision a new bucket. Immutable.
	// +optional
	ExistingBucketName ObjectName `json:"existingBucketName,omitempty"`
}

// BucketClaimStatus is the observed state of a BucketClaim, written by the COSI controller.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.boundBucketName) || (has(self.boundBucketName) && self.boundBucketName == oldSelf.boundBucketName)",fieldPath=".boundBucketName",message="boundBucketName cannot be changed or removed once set"
type BucketClaimStatus struct {
	// conditions report the state of the claim: Provisioned (copied from the Bucket once it is
	// provisioned), ResourcesValidated and ProvisionFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// boundBucketName is the name of the Bucket this claim is bound to. For a new bucket, COSI
	// records it ("bc-" followed by the claim's UID) before creating the Bucket; once set it
	// cannot change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BoundBucketName string `json:"boundBucketName,omitempty"`

	// protocols lists the protocols the bound bucket supports. BucketAccesses for this claim can
	// use any of them.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=3
	Protocols []Protocol `json:"protocols,omitempty"`
}

// BucketClaim is a user's request for a bucket, the way a PersistentVolumeClaim requests a volume.
// COSI binds it to a new Bucket created from its BucketClass, or to an existing Bucket an admin
// imported. Use a BucketAccess to get credentials for the claimed bucket.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=cosi;objectstorage,shortName=bc
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support"
// +kubebuilder:printcolumn:name="Provisioned",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].status`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.bucketClassName`
// +kubebuilder:printcolumn:name="Bucket",type=string,JSONPath=`.status.boundBucketName`
// +kubebuilder:printcolumn:name="Protocols",type=string,JSONPath=`.status.protocols`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="has(self.status) || !has(oldSelf.status) || !has(oldSelf.status.boundBucketName)",fieldPath=".status.boundBucketName",message="boundBucketName cannot be changed or removed once set"
type BucketClaim struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the BucketClaim: either a BucketClass for a new bucket, or an
	// existing Bucket to bind to. Immutable.
	// +required
	Spec BucketClaimSpec `json:"spec"`

	// status is the observed state of the BucketClaim, written by the COSI controller.
	// +optional
	Status BucketClaimStatus `json:"status,omitempty,omitzero"`
}

// BucketClaimList is a list of BucketClaims.
// +kubebuilder:object:root=true
type BucketClaimList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BucketClaim `json:"items"`
}
