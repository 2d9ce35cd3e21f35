package sidecar

import (
	"maps"
	"strings"
	"testing"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// TestReservedParametersRegistry: every reserved key is under the group name, and every parameter
// the v1alpha1 adapter reads is in the registry as the adapter's, on BucketAccessClasses.
func TestReservedParametersRegistry(t *testing.T) {
	for k := range reservedParameters {
		if !strings.HasPrefix(k, cosiapi.GroupName+"/") {
			t.Errorf("reserved parameter %q is not under %s/", k, cosiapi.GroupName)
		}
	}
	for _, k := range v1alpha1.AccessClassParameters() {
		if p, ok := reservedParameters[k]; !ok || p.owner != ownerV1alpha1Adapter || p.class != accessClass {
			t.Errorf("the adapter's parameter %s is in the registry as %+v (present: %v)", k, p, ok)
		}
	}
}

// TestReservedParametersReachTheirOwner: each reserved parameter reaches its owner and no one else.
// The sidecar's own never reach the driver client; the v1alpha1 adapter's reach it when the driver
// speaks v1alpha1 (the adapter removes them before the driver) and never a v1alpha2 driver; an
// unknown key under the group name, or one on the wrong kind of class, is refused.
func TestReservedParametersReachTheirOwner(t *testing.T) {
	access := map[string]string{
		"tier":                          "gold",
		cosiapi.ParameterRotationPeriod: "720h",
		v1alpha1.ParameterAccessModes:   "objectData=ReadOnly",
	}
	p, err := parseAccessParameters(access)
	if err != nil || p.rotationPeriod.Hours() != 720 {
		t.Fatalf("parseAccessParameters: %+v, %v", p, err)
	}
	for _, tc := range []struct {
		protocol string
		want     map[string]string
	}{
		{driverclient.ProtocolV1alpha1, map[string]string{
			"tier": "gold", v1alpha1.ParameterAccessModes: "objectData=ReadOnly",
		}},
		{driverclient.ProtocolV1alpha2, map[string]string{"tier": "gold"}},
	} {
		if got := driverParameters(access, tc.protocol); !maps.Equal(got, tc.want) {
			t.Errorf("%s driver gets %v, want %v", tc.protocol, got, tc.want)
		}
	}
	if len(access) != 3 {
		t.Errorf("driverParameters changed the class's parameters: %v", access)
	}

	for _, tc := range []struct {
		name   string
		params map[string]string
		bucket bool
		want   string
	}{
		{"unknown key", map[string]string{cosiapi.GroupName + "/v1alpha1-acess-modes": "x"}, false, "unknown COSI parameter"},
		{"the adapter's key on a BucketClass", map[string]string{v1alpha1.ParameterAccessModes: "objectData=ReadOnly"}, true,
			"a BucketAccessClass parameter, not a BucketClass one"},
		{"a BucketClass key on a BucketAccessClass", map[string]string{cosiapi.ParameterRefreshBucketInfo: "true"}, false,
			"a BucketClass parameter, not a BucketAccessClass one"},
	} {
		var err error
		if tc.bucket {
			_, err = parseBucketParameters(tc.params)
		} else {
			_, err = parseAccessParameters(tc.params)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error saying %q", tc.name, err, tc.want)
		}
	}
	// The message of an unknown key names what COSI knows on that kind of class.
	_, err = parseAccessParameters(map[string]string{cosiapi.GroupName + "/x": "1"})
	for _, k := range []string{cosiapi.ParameterRotationPeriod, v1alpha1.ParameterAccessModes} {
		if err == nil || !strings.Contains(err.Error(), k) {
			t.Errorf("the message %v does not name %s", err, k)
		}
	}
}
