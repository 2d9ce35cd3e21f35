// Package v1alpha2 contains the COSI API types of group objectstorage.k8s.io, version v1alpha2, as
// specified by KEP-1979 "Object Storage Support".
//
// Five kinds make up the API:
//   - BucketClass and BucketAccessClass (cluster-scoped, admin-owned) configure how buckets and
//     accesses are provisioned, like StorageClass does for volumes;
//   - BucketClaim (namespaced, user-owned) asks for a bucket, like a PersistentVolumeClaim;
//   - Bucket (cluster-scoped) represents one bucket in the object store, like a PersistentVolume;
//   - BucketAccess (namespaced, user-owned) asks for credentials to one or more claimed buckets,
//     delivered in Secrets.
//
// Validation that the API server can do (required fields, enums, formats, immutability) is
// expressed with OpenAPI and CEL markers on the types, so invalid objects are rejected when they
// are applied rather than failing later in a controller.
//
// A status field that cannot change once set has its rule on the status type (a transition rule,
// which runs only when the old and new status both exist) and a second, cheap one on the object
// that only refuses removing the whole status. The API server runs the rules on every write of the
// object, status writes included: written on the object as one rule comparing old and new status,
// they cost an access's writes about 8 % more API-server CPU (docs/benchmark.md).
//
// +kubebuilder:object:generate=true
// +groupName=objectstorage.k8s.io
package v1alpha2
