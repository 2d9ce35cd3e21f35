package v1alpha2

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Getters and setters of the status conditions, so that one conditions library serves every
// kind that has them (cluster-api's util/conditions works the same way). The classes have no
// status, hence no conditions.

// GetConditions returns the conditions of the BucketClaim.
func (c *BucketClaim) GetConditions() []metav1.Condition { return c.Status.Conditions }

// SetConditions replaces the conditions of the BucketClaim.
func (c *BucketClaim) SetConditions(conds []metav1.Condition) { c.Status.Conditions = conds }

// GetConditions returns the conditions of the Bucket.
func (b *Bucket) GetConditions() []metav1.Condition { return b.Status.Conditions }

// SetConditions replaces the conditions of the Bucket.
func (b *Bucket) SetConditions(conds []metav1.Condition) { b.Status.Conditions = conds }

// GetConditions returns the conditions of the BucketAccess.
func (a *BucketAccess) GetConditions() []metav1.Condition { return a.Status.Conditions }

// SetConditions replaces the conditions of the BucketAccess.
func (a *BucketAccess) SetConditions(conds []metav1.Condition) { a.Status.Conditions = conds }
