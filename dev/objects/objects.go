// Package objects builds COSI API objects for tests and the benchmark: one function per kind
// taking what every object of the kind needs, and functional options for the rest, so that a
// test names only what it is about.
//
//	claim := objects.BucketClaim(ns, "photos", class.Name, objects.Protocols(cosiapi.ProtocolS3))
//	access := objects.BucketAccess(ns, "writer", accessClass.Name, objects.Grant(claim.Name, "creds", objects.ReadWrite))
package objects

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// ReadWrite and ReadOnly are the access modes of the tests: objects read and written, or read.
var (
	ReadWrite = cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite}
	ReadOnly  = cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadOnly}
)

// BucketClass is a cluster-scoped class of driver with the deletion policy.
func BucketClass(
	name, driver string,
	policy cosiapi.DeletionPolicy,
	opts ...func(*cosiapi.BucketClass),
) *cosiapi.BucketClass {
	c := &cosiapi.BucketClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketClassSpec{DriverName: driver, DeletionPolicy: policy}}
	return apply(c, opts)
}

// ClassParameters sets a BucketClass's parameters (for the driver).
func ClassParameters(params map[string]string) func(*cosiapi.BucketClass) {
	return func(c *cosiapi.BucketClass) { c.Spec.Parameters = params }
}

// BucketAccessClass is a cluster-scoped access class of driver.
func BucketAccessClass(name, driver string, opts ...func(*cosiapi.BucketAccessClass)) *cosiapi.BucketAccessClass {
	c := &cosiapi.BucketAccessClass{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketAccessClassSpec{DriverName: driver}}
	return apply(c, opts)
}

// AccessParameters sets a BucketAccessClass's parameters (for the driver).
func AccessParameters(params map[string]string) func(*cosiapi.BucketAccessClass) {
	return func(c *cosiapi.BucketAccessClass) { c.Spec.Parameters = params }
}

// MultiBucket lets one access of the class span several claims.
func MultiBucket(c *cosiapi.BucketAccessClass) {
	c.Spec.MultiBucketAccess = cosiapi.MultiBucketAccessMultipleBuckets
}

// BucketClaim is a claim in namespace for a new bucket of class.
func BucketClaim(namespace, name, class string, opts ...func(*cosiapi.BucketClaim)) *cosiapi.BucketClaim {
	c := &cosiapi.BucketClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cosiapi.BucketClaimSpec{BucketClassName: class}}
	return apply(c, opts)
}

// Protocols sets the protocols a claim asks for.
func Protocols(p ...cosiapi.Protocol) func(*cosiapi.BucketClaim) {
	return func(c *cosiapi.BucketClaim) { c.Spec.Protocols = p }
}

// S3 asks for the S3 protocol.
func S3(c *cosiapi.BucketClaim) { c.Spec.Protocols = []cosiapi.Protocol{cosiapi.ProtocolS3} }

// BucketAccess is an S3 access in namespace of class; Grant adds the claims it reaches.
func BucketAccess(namespace, name, class string, opts ...func(*cosiapi.BucketAccess)) *cosiapi.BucketAccess {
	a := &cosiapi.BucketAccess{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cosiapi.BucketAccessSpec{BucketAccessClassName: class, Protocol: cosiapi.ProtocolS3}}
	return apply(a, opts)
}

// Grant adds an access to claim with modes, its credentials in the Secret secret.
func Grant(claim, secret string, modes cosiapi.BucketAccessModes) func(*cosiapi.BucketAccess) {
	return func(a *cosiapi.BucketAccess) {
		a.Spec.BucketClaims = append(a.Spec.BucketClaims, cosiapi.BucketClaimAccess{
			BucketClaimName: claim, AccessSecretName: secret, AccessModes: modes})
	}
}

// Bucket is a Bucket of driver with the deletion policy.
func Bucket(name, driver string, policy cosiapi.DeletionPolicy, opts ...func(*cosiapi.Bucket)) *cosiapi.Bucket {
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: cosiapi.BucketSpec{DriverName: driver, DeletionPolicy: policy}}
	return apply(b, opts)
}

// ClaimedBy binds a Bucket to the claim namespace/name with uid (empty for none).
func ClaimedBy(namespace, name string, uid types.UID) func(*cosiapi.Bucket) {
	return func(b *cosiapi.Bucket) {
		b.Spec.BucketClaimRef = cosiapi.BucketClaimReference{Name: name, Namespace: namespace, UID: uid}
	}
}

// BucketProtocols sets the protocols of a Bucket.
func BucketProtocols(p ...cosiapi.Protocol) func(*cosiapi.Bucket) {
	return func(b *cosiapi.Bucket) { b.Spec.Protocols = p }
}

func apply[T any](obj T, opts []func(T)) T {
	for _, o := range opts {
		o(obj)
	}
	return obj
}
