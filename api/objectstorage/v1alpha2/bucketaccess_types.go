package v1alpha2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BucketAccessModes are the read/write modes a BucketAccess asks for, in the three categories
// KEP-1979 separates. An empty category means the workload does not need that permission and does
// not care whether it is granted. At least one category must be requested.
// +kubebuilder:validation:XValidation:rule="has(self.objectData) || has(self.objectMetadata) || has(self.bucketMetadata)",message="at least one of objectData, objectMetadata or bucketMetadata must be requested"
type BucketAccessModes struct {
	// objectData is the mode for reading and writing objects in the bucket (get, put, list,
	// delete objects).
	// +optional
	ObjectData BucketAccessMode `json:"objectData,omitempty"`

	// objectMetadata is the mode for reading and writing metadata of objects in the bucket (for
	// example object tags and ACLs).
	// +optional
	ObjectMetadata BucketAccessMode `json:"objectMetadata,omitempty"`

	// bucketMetadata is the mode for reading and writing metadata of the bucket itself (for
	// example bucket tags or versioning configuration).
	// +optional
	BucketMetadata BucketAccessMode `json:"bucketMetadata,omitempty"`
}

// BucketClaimAccess asks for access to one BucketClaim and names the Secret to deliver it in.
// (KEP-1979 calls this type BucketClaimReference; it is renamed here because Bucket already has a
// BucketClaimReference with other fields.)
type BucketClaimAccess struct {
	// bucketClaimName is the name of a BucketClaim in the BucketAccess's namespace.
	// +required
	BucketClaimName ObjectName `json:"bucketClaimName"`

	// accessSecretName is the name of the Secret, in the BucketAccess's namespace, that COSI
	// creates with the bucket's connection details and credentials. COSI will not overwrite a
	// Secret it does not own. The Secret is deleted with the BucketAccess. Each claim needs its
	// own Secret name.
	// +required
	AccessSecretName ObjectName `json:"accessSecretName"`

	// accessModes are the read/write modes wanted for the claim's bucket. At least one must be
	// requested.
	// +required
	AccessModes BucketAccessModes `json:"accessModes"`
}

// BucketAccessSpec is the desired state of a BucketAccess. Immutable: create a new BucketAccess to
// change what it grants.
// +kubebuilder:validation:XValidation:rule="self.bucketClaims == oldSelf.bucketClaims",fieldPath=".bucketClaims",message="bucketClaims is immutable"
// +kubebuilder:validation:XValidation:rule="self.bucketAccessClassName == oldSelf.bucketAccessClassName",fieldPath=".bucketAccessClassName",message="bucketAccessClassName is immutable"
// +kubebuilder:validation:XValidation:rule="self.protocol == oldSelf.protocol",fieldPath=".protocol",message="protocol is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.serviceAccountName) == has(oldSelf.serviceAccountName) && (!has(self.serviceAccountName) || self.serviceAccountName == oldSelf.serviceAccountName)",fieldPath=".serviceAccountName",message="serviceAccountName is immutable"
type BucketAccessSpec struct {
	// bucketClaims lists the BucketClaims to access, each with its Secret name and access modes.
	// A claim may appear only once. More than one claim is allowed only when the
	// BucketAccessClass allows MultipleBuckets; all of them then share one set of credentials,
	// copied into each Secret.
	// +required
	// +listType=map
	// +listMapKey=bucketClaimName
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, b.accessSecretName == a.accessSecretName))",message="each bucket claim must use a different accessSecretName"
	BucketClaims []BucketClaimAccess `json:"bucketClaims"`

	// bucketAccessClassName is the name of the BucketAccessClass that configures this access.
	// +required
	BucketAccessClassName ObjectName `json:"bucketAccessClassName"`

	// protocol is the protocol the credentials are for (S3, Azure or GCS). Every referenced claim
	// must support it.
	// +required
	Protocol Protocol `json:"protocol"`

	// serviceAccountName is the name of a ServiceAccount in the BucketAccess's namespace that the
	// workload runs as. It is required when the BucketAccessClass uses ServiceAccount
	// authentication (the driver then lets Pods of that ServiceAccount authenticate implicitly),
	// and ignored with Key authentication.
	// +optional
	ServiceAccountName ObjectName `json:"serviceAccountName,omitempty"`
}

// AccessedBucket is a Bucket a BucketAccess grants access to, resolved by the COSI controller.
type AccessedBucket struct {
	// bucketClaimName is the entry of spec.bucketClaims this Bucket corresponds to, which gives
	// its access modes and Secret name.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BucketClaimName string `json:"bucketClaimName"`

	// bucketName is the name of the Bucket object bound to the claim.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	BucketName string `json:"bucketName"`

	// bucketID is the ID of the bucket in the object store, once the Bucket is provisioned.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	BucketID string `json:"bucketID,omitempty"`
}

// BucketAccessStatus is the observed state of a BucketAccess. The controller writes
// accessedBuckets, driverName, authenticationType and parameters (the hand-off to the sidecar);
// the sidecar writes accountID.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.accountID) || (has(self.accountID) && self.accountID == oldSelf.accountID)",fieldPath=".accountID",message="accountID cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.driverName) || (has(self.driverName) && self.driverName == oldSelf.driverName)",fieldPath=".driverName",message="driverName cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.authenticationType) || (has(self.authenticationType) && self.authenticationType == oldSelf.authenticationType)",fieldPath=".authenticationType",message="authenticationType cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.driverName) || (has(self.parameters) ? self.parameters : {}) == (has(oldSelf.parameters) ? oldSelf.parameters : {})",fieldPath=".parameters",message="parameters cannot change once driverName is set"
type BucketAccessStatus struct {
	// conditions report the state of the access: Provisioned, ResourcesValidated and
	// ProvisionFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// accountID is the ID of the account in the object store that holds this access. The sidecar
	// records it before granting access, so the access can always be revoked; once set it cannot
	// change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	AccountID string `json:"accountID,omitempty"`

	// accessedBuckets lists the Buckets this access is for, one per entry of spec.bucketClaims.
	// +optional
	// +listType=map
	// +listMapKey=bucketClaimName
	// +kubebuilder:validation:MaxItems=64
	AccessedBuckets []AccessedBucket `json:"accessedBuckets,omitempty"`

	// driverName is the BucketAccessClass's driver at the time of provisioning, kept so the access
	// can be managed and deleted even if the class changes or is deleted. Once set it cannot
	// change.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	DriverName string `json:"driverName,omitempty"`

	// authenticationType is the BucketAccessClass's authentication type at the time of
	// provisioning. Once set it cannot change.
	// +optional
	AuthenticationType AuthenticationType `json:"authenticationType,omitempty"`

	// parameters are the BucketAccessClass's parameters at the time of provisioning. They cannot
	// change once driverName is set.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	Parameters map[string]string `json:"parameters,omitempty"`
}

// BucketAccess is a user's request for credentials to one or more claimed buckets. COSI creates an
// account in the object store with exactly the requested access modes and writes the connection
// details and credentials into one Secret per claim, for workloads to mount.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,categories=cosi;objectstorage,shortName=ba
// +kubebuilder:metadata:annotations="api-approved.kubernetes.io=https://github.com/kubernetes/enhancements/tree/master/keps/sig-storage/1979-object-storage-support"
// +kubebuilder:printcolumn:name="Provisioned",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].status`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.spec.bucketAccessClassName`
// +kubebuilder:printcolumn:name="Protocol",type=string,JSONPath=`.spec.protocol`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driverName`,priority=1
// +kubebuilder:printcolumn:name="Account ID",type=string,JSONPath=`.status.accountID`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Provisioned")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="has(self.status) || !has(oldSelf.status) || !has(oldSelf.status.accountID)",fieldPath=".status.accountID",message="accountID cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="has(self.status) || !has(oldSelf.status) || !has(oldSelf.status.driverName)",fieldPath=".status.driverName",message="driverName cannot be changed or removed once set"
// +kubebuilder:validation:XValidation:rule="has(self.status) || !has(oldSelf.status) || !has(oldSelf.status.authenticationType)",fieldPath=".status.authenticationType",message="authenticationType cannot be changed or removed once set"
type BucketAccess struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired state of the BucketAccess: which claims, with which access modes, through
	// which class and protocol. Immutable: create a new BucketAccess to change what it grants.
	// +required
	Spec BucketAccessSpec `json:"spec"`

	// status is the observed state of the BucketAccess, written by the COSI controller and
	// sidecar.
	// +optional
	Status BucketAccessStatus `json:"status,omitempty,omitzero"`
}

// BucketAccessList is a list of BucketAccesses.
// +kubebuilder:object:root=true
type BucketAccessList struct {
	metav1.TypeMeta `json:",inline"`
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BucketAccess `json:"items"`
}
