// Package conditions reads and writes the status conditions of the COSI objects, through the
// GetConditions/SetConditions methods of the API types (cluster-api's util/conditions is the
// model). Every condition it sets records the generation of the object it was computed for, and
// keeps its lastTransitionTime while its status does not change.
package conditions

import (
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// Getter is an object with conditions.
type Getter interface {
	GetConditions() []metav1.Condition
}

// Setter is an object whose conditions can be set; its generation is recorded in them.
type Setter interface {
	Getter
	GetGeneration() int64
	SetConditions([]metav1.Condition)
}

// maxMessage bounds condition and event messages; driver messages can be long.
const maxMessage = 1024

// Truncate bounds a condition or event message.
func Truncate(s string) string {
	if len(s) <= maxMessage {
		return s
	}
	return s[:maxMessage-3] + "..."
}

// Set sets the condition typ of obj, with obj's generation as its observedGeneration. Its
// lastTransitionTime changes only when its status does.
func Set(obj Setter, typ string, status metav1.ConditionStatus, reason, msg string) {
	conds := obj.GetConditions()
	meta.SetStatusCondition(&conds, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: Truncate(msg), ObservedGeneration: obj.GetGeneration(),
	})
	obj.SetConditions(conds)
}

// MarkTrue sets the condition typ of obj to True.
func MarkTrue(obj Setter, typ, reason, msg string) { Set(obj, typ, metav1.ConditionTrue, reason, msg) }

// MarkFalse sets the condition typ of obj to False.
func MarkFalse(obj Setter, typ, reason, msg string) {
	Set(obj, typ, metav1.ConditionFalse, reason, msg)
}

// MarkUnknown sets the condition typ of obj to Unknown.
func MarkUnknown(obj Setter, typ, reason, msg string) {
	Set(obj, typ, metav1.ConditionUnknown, reason, msg)
}

// Init adds each condition type that obj lacks as Unknown (ReasonPending): every COSI condition
// starts Unknown (KEP-1979 "Conditions"). Conditions obj has are left as they are.
func Init(obj Setter, types ...string) {
	for _, typ := range types {
		if Get(obj, typ) == nil {
			MarkUnknown(obj, typ, cosiapi.ReasonPending, "")
		}
	}
}

// Mirror copies the condition typ of src to dst (status, reason and message; the generation is
// dst's). It reports whether src has the condition; dst is left as it is when it does not.
func Mirror(dst Setter, src Getter, typ string) bool {
	c := Get(src, typ)
	if c == nil {
		return false
	}
	Set(dst, typ, c.Status, c.Reason, c.Message)
	return true
}

// Get returns the condition typ of obj, or nil.
func Get(obj Getter, typ string) *metav1.Condition {
	return meta.FindStatusCondition(obj.GetConditions(), typ)
}

// IsTrue reports whether the condition typ of obj is True.
func IsTrue(obj Getter, typ string) bool { return Has(obj, typ, metav1.ConditionTrue) }

// IsFalse reports whether the condition typ of obj is False.
func IsFalse(obj Getter, typ string) bool { return Has(obj, typ, metav1.ConditionFalse) }

// IsKnown reports whether the condition typ of obj is True or False: decided, not missing or
// Unknown.
func IsKnown(obj Getter, typ string) bool { return IsTrue(obj, typ) || IsFalse(obj, typ) }

// Has reports whether the condition typ of obj has the status and, when reasons are given, one
// of them.
func Has(obj Getter, typ string, status metav1.ConditionStatus, reasons ...string) bool {
	c := Get(obj, typ)
	return c != nil && c.Status == status && (len(reasons) == 0 || slices.Contains(reasons, c.Reason))
}

// Changed reports whether two condition lists differ in anything but transition times.
func Changed(before, after []metav1.Condition) bool {
	return !slices.EqualFunc(before, after, func(a, b metav1.Condition) bool {
		return a.Type == b.Type && a.Status == b.Status && a.Reason == b.Reason && a.Message == b.Message &&
			a.ObservedGeneration == b.ObservedGeneration
	})
}
