package conditions_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
)

const typ = cosiapi.ConditionProvisioned

func claimWith(generation int64, conds ...metav1.Condition) *cosiapi.BucketClaim {
	c := &cosiapi.BucketClaim{}
	c.Generation = generation
	c.Status.Conditions = conds
	return c
}

var past = metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))

func cond(s metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{Type: typ, Status: s, Reason: reason, LastTransitionTime: past}
}

func TestSet(t *testing.T) {
	for _, tc := range []struct {
		name     string
		before   []metav1.Condition
		status   metav1.ConditionStatus
		reason   string
		msg      string
		keepTime bool // lastTransitionTime stays the one in before
	}{
		{name: "added", status: metav1.ConditionUnknown, reason: cosiapi.ReasonProvisioning},
		{
			name:   "status changes",
			before: []metav1.Condition{cond(metav1.ConditionUnknown, cosiapi.ReasonProvisioning)},
			status: metav1.ConditionTrue, reason: cosiapi.ReasonProvisioned, msg: "done",
		},
		{
			name:   "same status, new reason and message",
			before: []metav1.Condition{cond(metav1.ConditionUnknown, cosiapi.ReasonPending)},
			status: metav1.ConditionUnknown, reason: cosiapi.ReasonWaitingForResources, msg: "waiting", keepTime: true,
		},
		{
			name:   "unchanged",
			before: []metav1.Condition{cond(metav1.ConditionTrue, cosiapi.ReasonProvisioned)},
			status: metav1.ConditionTrue, reason: cosiapi.ReasonProvisioned, keepTime: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := claimWith(7, tc.before...)
			conditions.Set(obj, typ, tc.status, tc.reason, tc.msg)
			if len(obj.Status.Conditions) != 1 {
				t.Fatalf("conditions: %+v", obj.Status.Conditions)
			}
			c := obj.Status.Conditions[0]
			if c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.msg || c.ObservedGeneration != 7 {
				t.Errorf("condition %+v, want status %s reason %s message %q generation 7", c, tc.status, tc.reason, tc.msg)
			}
			if kept := c.LastTransitionTime.Equal(&past); kept != tc.keepTime {
				t.Errorf("lastTransitionTime %v kept=%v, want kept=%v", c.LastTransitionTime, kept, tc.keepTime)
			}
			if c.LastTransitionTime.IsZero() {
				t.Error("lastTransitionTime not set")
			}
		})
	}
}

func TestMarkAndIs(t *testing.T) {
	for _, tc := range []struct {
		mark               func(conditions.Setter, string, string, string)
		want               metav1.ConditionStatus
		isTrue, isFalse    bool
		hasReason, hasNone bool
	}{
		{mark: conditions.MarkTrue, want: metav1.ConditionTrue, isTrue: true},
		{mark: conditions.MarkFalse, want: metav1.ConditionFalse, isFalse: true},
		{mark: conditions.MarkUnknown, want: metav1.ConditionUnknown},
	} {
		obj := claimWith(1)
		if conditions.IsKnown(obj, typ) || conditions.Get(obj, typ) != nil {
			t.Fatal("a missing condition is neither True nor False")
		}
		tc.mark(obj, typ, cosiapi.ReasonRevoked, "m")
		if got := conditions.Get(obj, typ); got == nil || got.Status != tc.want {
			t.Fatalf("marked %s: %+v", tc.want, got)
		}
		if conditions.IsKnown(obj, typ) != (tc.isTrue || tc.isFalse) {
			t.Errorf("%s: IsKnown=%v", tc.want, conditions.IsKnown(obj, typ))
		}
		if conditions.IsTrue(obj, typ) != tc.isTrue || conditions.IsFalse(obj, typ) != tc.isFalse {
			t.Errorf("%s: IsTrue=%v IsFalse=%v", tc.want, conditions.IsTrue(obj, typ), conditions.IsFalse(obj, typ))
		}
		if !conditions.Has(obj, typ, tc.want) ||
			!conditions.Has(obj, typ, tc.want, cosiapi.ReasonValid, cosiapi.ReasonRevoked) {
			t.Errorf("%s: Has with the condition's status and reason is false", tc.want)
		}
		if conditions.Has(obj, typ, tc.want, cosiapi.ReasonValid) {
			t.Errorf("%s: Has with another reason is true", tc.want)
		}
		if conditions.Has(obj, cosiapi.ConditionProvisionFailed, tc.want) {
			t.Errorf("%s: Has of a missing condition is true", tc.want)
		}
	}
}

func TestInit(t *testing.T) {
	obj := claimWith(
		3,
		metav1.Condition{
			Type:               typ,
			Status:             metav1.ConditionTrue,
			Reason:             cosiapi.ReasonProvisioned,
			LastTransitionTime: past,
		},
	)
	conditions.Init(obj, typ, cosiapi.ConditionProvisionFailed)
	if !conditions.IsTrue(obj, typ) {
		t.Errorf("Init changed an existing condition: %+v", conditions.Get(obj, typ))
	}
	pf := conditions.Get(obj, cosiapi.ConditionProvisionFailed)
	if pf == nil || pf.Status != metav1.ConditionUnknown || pf.Reason != cosiapi.ReasonPending ||
		pf.ObservedGeneration != 3 {
		t.Errorf("Init added %+v, want Unknown %s at generation 3", pf, cosiapi.ReasonPending)
	}
}

func TestMirror(t *testing.T) {
	bucket := &cosiapi.Bucket{}
	bucket.Generation = 9
	claim := claimWith(2)
	if conditions.Mirror(claim, bucket, typ) || len(claim.Status.Conditions) != 0 {
		t.Fatalf("mirrored a missing condition: %+v", claim.Status.Conditions)
	}
	conditions.MarkFalse(bucket, typ, cosiapi.ReasonProvisioningFailed, "driver said no")
	if !conditions.Mirror(claim, bucket, typ) {
		t.Fatal("Mirror of an existing condition reported false")
	}
	c := conditions.Get(claim, typ)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != cosiapi.ReasonProvisioningFailed ||
		c.Message != "driver said no" ||
		c.ObservedGeneration != 2 {
		t.Errorf("mirrored %+v, want the Bucket's condition with the claim's generation 2", c)
	}
}

func TestChanged(t *testing.T) {
	base := metav1.Condition{
		Type:               typ,
		Status:             metav1.ConditionTrue,
		Reason:             cosiapi.ReasonProvisioned,
		Message:            "m",
		ObservedGeneration: 1,
		LastTransitionTime: past,
	}
	with := func(f func(*metav1.Condition)) []metav1.Condition {
		c := base
		f(&c)
		return []metav1.Condition{c}
	}
	for _, tc := range []struct {
		name  string
		after []metav1.Condition
		want  bool
	}{
		{"same", with(func(*metav1.Condition) {}), false},
		{"transition time only", with(func(c *metav1.Condition) { c.LastTransitionTime = metav1.Now() }), false},
		{"status", with(func(c *metav1.Condition) { c.Status = metav1.ConditionFalse }), true},
		{"reason", with(func(c *metav1.Condition) { c.Reason = cosiapi.ReasonRevoked }), true},
		{"message", with(func(c *metav1.Condition) { c.Message = "n" }), true},
		{"generation", with(func(c *metav1.Condition) { c.ObservedGeneration = 2 }), true},
		{"added", append(with(func(*metav1.Condition) {}), metav1.Condition{Type: cosiapi.ConditionProvisionFailed}), true},
		{"removed", nil, true},
	} {
		if got := conditions.Changed([]metav1.Condition{base}, tc.after); got != tc.want {
			t.Errorf("%s: Changed=%v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	for _, n := range []int{0, 10, 1024, 1025, 5000} {
		s := strings.Repeat("x", n)
		got := conditions.Truncate(s)
		switch {
		case n <= 1024 && got != s:
			t.Errorf("a message of %d bytes was changed", n)
		case n > 1024 && (len(got) != 1024 || !strings.HasSuffix(got, "...")):
			t.Errorf("a message of %d bytes became %d bytes", n, len(got))
		}
	}
	obj := claimWith(1)
	conditions.MarkFalse(obj, typ, cosiapi.ReasonDriverError, strings.Repeat("y", 4000))
	if len(conditions.Get(obj, typ).Message) != 1024 {
		t.Error("Set does not bound the message")
	}
}
