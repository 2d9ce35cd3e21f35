package integration

import (
	"fmt"
	"testing"

	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
)

// TestOperationMetrics checks KEP-1979's controller metrics after one full lifecycle: a create and
// a delete observed for each kind, labelled with the driver.
func TestOperationMetrics(t *testing.T) {
	// Not parallel: it reads counters that other tests also move; it only checks they moved.
	before := operationCounts(t)
	class, aclass := bucketClass(cosiapi.DeletionPolicyDelete), accessClass(false)
	create(t, class)
	create(t, aclass)
	c := claim(class.Name)
	create(t, c)
	ba := access(aclass.Name, cosiapi.BucketAccessModeReadWrite, c)
	create(t, ba)
	provisioned(t, ba)
	provisioned(t, c)
	bucket := &cosiapi.Bucket{}
	bucket.Name = c.Status.BoundBucketName
	del(t, ba)
	env.Gone(t, ba)
	del(t, c)
	env.Gone(t, c)
	env.Gone(t, bucket)

	testenv.Eventually(t, func() error {
		after := operationCounts(t)
		for _, kind := range []string{"BucketClaim", "Bucket", "BucketAccess"} {
			for _, op := range []string{"Create", "Delete"} {
				key := fmt.Sprintf("%s/%s/%s/Succeeded", system.driverName, kind, op)
				if after[key] <= before[key] {
					return fmt.Errorf("cosi_operation_count{%s} did not grow: %v -> %v", key, before[key], after[key])
				}
			}
		}
		return nil
	})
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "cosi_operation_total_seconds" {
			if n := len(f.GetMetric()); n < 6 {
				t.Errorf("cosi_operation_total_seconds has %d series, want one per kind and operation", n)
			}
			return
		}
	}
	t.Error("no cosi_operation_total_seconds")
}

// operationCounts reads cosi_operation_count by "driver/kind/operation/status".
func operationCounts(t *testing.T) map[string]float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, f := range families {
		if f.GetName() != "cosi_operation_count" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			counts[l["driver_name"]+"/"+l["resource_kind"]+"/"+l["operation"]+"/"+l["status"]] = m.GetCounter().GetValue()
		}
	}
	return counts
}
