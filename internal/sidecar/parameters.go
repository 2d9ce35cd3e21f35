package sidecar

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Class parameters under COSI's group name are COSI's own (cosiapi.ParameterRotationPeriod):
// the sidecar reads them, and never passes them to the driver, which would refuse keys it does
// not know. They are parsed strictly: an unknown key or an invalid value stops the access (or
// Bucket) before the driver is asked anything, with a condition naming the key, rather than being
// ignored as a typo would be.

// cosiParameterPrefix prefixes the class parameters that are COSI's.
const cosiParameterPrefix = cosiapi.GroupName + "/"

// driverParameters are the parameters passed to the driver: params without COSI's own.
func driverParameters(params map[string]string) map[string]string {
	if !slices.ContainsFunc(slices.Collect(maps.Keys(params)), isCOSIParameter) {
		return params
	}
	out := maps.Clone(params)
	maps.DeleteFunc(out, func(k, _ string) bool { return isCOSIParameter(k) })
	return out
}

func isCOSIParameter(key string) bool { return strings.HasPrefix(key, cosiParameterPrefix) }

// accessParameters are COSI's own parameters of an access's class.
type accessParameters struct {
	// driver are the parameters passed to the driver (driverParameters).
	driver map[string]string
	// rotationPeriod is cosiapi.ParameterRotationPeriod; zero: no periodic rotation.
	rotationPeriod time.Duration
}

// parseAccessParameters reads COSI's own parameters of an access's class (its status.parameters),
// and sets apart those passed to the driver.
func parseAccessParameters(params map[string]string) (accessParameters, error) {
	out := accessParameters{driver: driverParameters(params)}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !isCOSIParameter(k) {
			continue
		}
		v := params[k]
		switch k {
		case cosiapi.ParameterRotationPeriod:
			d, err := time.ParseDuration(v)
			if err != nil {
				return out, fmt.Errorf("parameters[%s]: %q is an invalid duration (a Go duration, such as 720h)", k, v)
			}
			if d <= 0 {
				return out, fmt.Errorf("parameters[%s]: %q must be greater than zero", k, v)
			}
			out.rotationPeriod = d
		default:
			return out, fmt.Errorf("parameters[%s]: unknown COSI parameter (COSI knows %s on BucketAccessClasses)",
				k, cosiapi.ParameterRotationPeriod)
		}
	}
	return out, nil
}

// bucketParameters are COSI's own parameters of a Bucket's class.
type bucketParameters struct {
	// driver are the parameters passed to the driver (driverParameters).
	driver map[string]string
	// refreshInfo is cosiapi.ParameterRefreshBucketInfo.
	refreshInfo bool
}

// parseBucketParameters reads COSI's own parameters of a Bucket's class (its spec.parameters),
// and sets apart those passed to the driver.
func parseBucketParameters(params map[string]string) (bucketParameters, error) {
	out := bucketParameters{driver: driverParameters(params)}
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !isCOSIParameter(k) {
			continue
		}
		switch v := params[k]; k {
		case cosiapi.ParameterRefreshBucketInfo:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return out, fmt.Errorf("parameters[%s]: %q is not true or false", k, v)
			}
			out.refreshInfo = b
		default:
			return out, fmt.Errorf("parameters[%s]: unknown COSI parameter for a BucketClass (COSI knows %s; "+
				"%s is a BucketAccessClass parameter)", k, cosiapi.ParameterRefreshBucketInfo, cosiapi.ParameterRotationPeriod)
		}
	}
	return out, nil
}
