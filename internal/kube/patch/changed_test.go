package patch_test

import (
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/patch"
)

// TestChangedIsWhetherThePatchHasStatus: Changed, which skips the merge patch for equal objects,
// answers as the patch would, whatever changed.
func TestChangedIsWhetherThePatchHasStatus(t *testing.T) {
	at := metav1.NewTime(time.Date(2026, 11, 30, 3, 0, 0, 0, time.UTC))
	read := func() *cosiapi.BucketClaim {
		return &cosiapi.BucketClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "claim", ResourceVersion: "7"},
			Status: cosiapi.BucketClaimStatus{
				BoundBucketName: "bc-1",
				Conditions: []metav1.Condition{{
					Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue, Reason: cosiapi.ReasonProvisioned,
					Message: "ready", LastTransitionTime: at,
				}},
			},
		}
	}
	for _, tc := range []struct {
		name   string
		change func(*cosiapi.BucketClaim)
	}{
		{"nothing", func(*cosiapi.BucketClaim) {}},
		{"a condition's message", func(c *cosiapi.BucketClaim) { c.Status.Conditions[0].Message = "other" }},
		{"a condition's time only", func(c *cosiapi.BucketClaim) {
			c.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at.Add(time.Hour))
		}},
		{"the same time in another zone", func(c *cosiapi.BucketClaim) {
			c.Status.Conditions[0].LastTransitionTime = metav1.NewTime(at.In(time.FixedZone("east", 3600)))
		}},
		{"no conditions as an empty list", func(c *cosiapi.BucketClaim) { c.Status.Conditions = []metav1.Condition{} }},
		{"no conditions", func(c *cosiapi.BucketClaim) { c.Status.Conditions = nil }},
		{"metadata only", func(c *cosiapi.BucketClaim) { c.Labels = map[string]string{"a": "b"} }},
		{"the same value written again", func(c *cosiapi.BucketClaim) { c.Status.BoundBucketName = "bc-1" }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			claim := read()
			status := patch.NewStatus(nil, claim)
			tc.change(claim)
			changed, err := status.Changed()
			if err != nil {
				t.Fatal(err)
			}
			data, err := client.MergeFrom(read()).Data(claim)
			if err != nil {
				t.Fatal(err)
			}
			var p map[string]json.RawMessage
			if err := json.Unmarshal(data, &p); err != nil {
				t.Fatal(err)
			}
			if _, want := p["status"]; changed != want {
				t.Errorf("Changed() = %v, the merge patch %s", changed, data)
			}
		})
	}
}
