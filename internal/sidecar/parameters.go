package sidecar

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// Class parameters under COSI's group name are reserved: each has one owner that reads it, and the
// driver never sees one it does not own (it would refuse keys it does not know). They are parsed
// strictly: an unknown key, a key on the wrong kind of class or an invalid value stops the access
// (or Bucket) before the driver is asked anything, with a condition naming the key, rather than
// being ignored as a typo would be.

// cosiParameterPrefix prefixes the reserved class parameters.
const cosiParameterPrefix = cosiapi.GroupName + "/"

// parameterOwner is what reads a reserved class parameter.
type parameterOwner string

const (
	// ownerSidecar: the sidecar reads it (parseAccessParameters, parseBucketParameters), and never
	// passes it to the driver.
	ownerSidecar parameterOwner = "the sidecar"
	// ownerV1alpha1Adapter: pkg/driver/v1alpha1's adapter reads it (it says what a v1alpha1 request
	// cannot carry, such as the access modes the driver grants) and removes it before calling the
	// v1alpha1 driver. The sidecar passes it to the driver client when the driver speaks v1alpha1,
	// and removes it for a v1alpha2 driver, whose requests carry what it says.
	ownerV1alpha1Adapter parameterOwner = "the v1alpha1 adapter"
)

// classKind is the kind of class a reserved parameter belongs on.
type classKind string

const (
	bucketClass classKind = "BucketClass"
	accessClass classKind = "BucketAccessClass"
)

// reservedParameter is one entry of the registry.
type reservedParameter struct {
	class classKind
	owner parameterOwner
}

// reservedParameters is the one registry of the reserved class parameters: every key under the
// group name that COSI knows, the kind of class it belongs on and its owner. A key under the group
// name that it does not list is refused. The adapter's keys come from the adapter
// (v1alpha1.AccessClassParameters), so that a parameter it reads cannot be missing here.
var reservedParameters = func() map[string]reservedParameter {
	r := map[string]reservedParameter{
		cosiapi.ParameterRotationPeriod:    {class: accessClass, owner: ownerSidecar},
		cosiapi.ParameterRefreshBucketInfo: {class: bucketClass, owner: ownerSidecar},
	}
	for _, k := range v1alpha1.AccessClassParameters() {
		r[k] = reservedParameter{class: accessClass, owner: ownerV1alpha1Adapter}
	}
	return r
}()

func isCOSIParameter(key string) bool { return strings.HasPrefix(key, cosiParameterPrefix) }

// driverParameters are the parameters passed to the driver client of a driver speaking protocol
// (driverclient.ProtocolV1alpha2 or ProtocolV1alpha1): the class's own, and the reserved ones
// whose owner is behind the driver client, the v1alpha1 adapter's when the driver speaks v1alpha1.
// The parameters were parsed before (parseAccessParameters, parseBucketParameters), so an unknown
// reserved key never gets here; were one to, it is removed.
func driverParameters(params map[string]string, protocol string) map[string]string {
	passed := func(k string) bool {
		return !isCOSIParameter(k) ||
			reservedParameters[k].owner == ownerV1alpha1Adapter && protocol == driverclient.ProtocolV1alpha1
	}
	if !slices.ContainsFunc(slices.Collect(maps.Keys(params)), func(k string) bool { return !passed(k) }) {
		return params
	}
	out := maps.Clone(params)
	maps.DeleteFunc(out, func(k, _ string) bool { return !passed(k) })
	return out
}

// checkReserved refuses a reserved key that the registry does not know, or that belongs on another
// kind of class than class; it returns whether the sidecar reads the key itself.
func checkReserved(key string, class classKind) (sidecarOwned bool, err error) {
	p, ok := reservedParameters[key]
	switch {
	case !ok:
		return false, fmt.Errorf("parameters[%s]: unknown COSI parameter (COSI knows %s on %ss)",
			key, strings.Join(reservedKeys(class), ", "), class)
	case p.class != class:
		return false, fmt.Errorf("parameters[%s]: a %s parameter, not a %s one (COSI knows %s on %ss)",
			key, p.class, class, strings.Join(reservedKeys(class), ", "), class)
	}
	return p.owner == ownerSidecar, nil
}

// reservedKeys lists the registry's keys for a kind of class, for messages.
func reservedKeys(class classKind) []string {
	var keys []string
	for k, p := range reservedParameters {
		if p.class == class {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// accessParameters are the sidecar's own parameters of an access's class.
type accessParameters struct {
	// rotationPeriod is cosiapi.ParameterRotationPeriod; zero: no periodic rotation.
	rotationPeriod time.Duration
}

// parseAccessParameters checks the reserved parameters of an access's class (its
// status.parameters) and reads the sidecar's own. The adapter's are checked by the adapter.
func parseAccessParameters(params map[string]string) (accessParameters, error) {
	var out accessParameters
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !isCOSIParameter(k) {
			continue
		}
		own, err := checkReserved(k, accessClass)
		if err != nil {
			return out, err
		}
		if !own {
			continue
		}
		switch v := params[k]; k {
		case cosiapi.ParameterRotationPeriod:
			d, err := time.ParseDuration(v)
			if err != nil {
				return out, fmt.Errorf("parameters[%s]: %q is an invalid duration (a Go duration, such as 720h)", k, v)
			}
			if d <= 0 {
				return out, fmt.Errorf("parameters[%s]: %q must be greater than zero", k, v)
			}
			out.rotationPeriod = d
		}
	}
	return out, nil
}

// bucketParameters are the sidecar's own parameters of a Bucket's class.
type bucketParameters struct {
	// refreshInfo is cosiapi.ParameterRefreshBucketInfo.
	refreshInfo bool
}

// parseBucketParameters checks the reserved parameters of a Bucket's class (its spec.parameters)
// and reads the sidecar's own.
func parseBucketParameters(params map[string]string) (bucketParameters, error) {
	var out bucketParameters
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !isCOSIParameter(k) {
			continue
		}
		own, err := checkReserved(k, bucketClass)
		if err != nil {
			return out, err
		}
		if !own {
			continue
		}
		switch v := params[k]; k {
		case cosiapi.ParameterRefreshBucketInfo:
			b, err := strconv.ParseBool(v)
			if err != nil {
				return out, fmt.Errorf("parameters[%s]: %q is not true or false", k, v)
			}
			out.refreshInfo = b
		}
	}
	return out, nil
}
