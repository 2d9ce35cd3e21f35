package driverclient

import "github.com/kube-cosi/cosi/pkg/driver/internal/calls"

// The keys each operation holds (package calls), under the short names operations.go uses.
type lockKey = calls.LockKey

var (
	bucketKeys  = calls.BucketKeys
	accessKeys  = calls.AccessKeys
	accessedIDs = calls.AccessedIDs
	revokedIDs  = calls.RevokedIDs
)
