package driver

import "github.com/kube-cosi/cosi/pkg/driver/internal/calls"

// OperationBuckets are the histogram buckets, in seconds, of KEP-1979's operation duration metrics.
var OperationBuckets = calls.OperationBuckets
