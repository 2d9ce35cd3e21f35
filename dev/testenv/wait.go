package testenv

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Eventually polls f until it returns nil, and fails t with f's last error after a generous
// timeout. It waits for reconciliation; it does not measure speed (that is the benchmark's job).
func Eventually(t testing.TB, f func() error) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if err = f(); err == nil {
			return
		}
	}
	t.Fatalf("timed out: %v", err)
}

// Never checks, for d, that f keeps returning nil: for properties such as "a final error is not
// retried" or "nothing is deleted", which only hold over time.
func Never(t testing.TB, d time.Duration, f func() error) {
	t.Helper()
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}

// Gone waits until obj no longer exists.
func (e *Env) Gone(t testing.TB, obj client.Object) {
	t.Helper()
	Eventually(t, func() error {
		err := e.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj)
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf(
			"%s still exists (finalizers %v, annotations %v): %w",
			obj.GetName(),
			obj.GetFinalizers(),
			obj.GetAnnotations(),
			err,
		)
	})
}

// Condition waits until obj has the condition typ with the status and reason, and returns it.
func Condition[T client.Object](
	t testing.TB,
	e *Env,
	obj T,
	conds func(T) []metav1.Condition,
	typ string,
	s metav1.ConditionStatus,
	reason string,
) metav1.Condition {
	t.Helper()
	var found metav1.Condition
	Eventually(t, func() error {
		if err := e.Client.Get(t.Context(), client.ObjectKeyFromObject(obj), obj); err != nil {
			return err
		}
		c := meta.FindStatusCondition(conds(obj), typ)
		if c == nil || c.Status != s || c.Reason != reason {
			return fmt.Errorf("%s: want %s=%s (%s), have %+v", obj.GetName(), typ, s, reason, conds(obj))
		}
		found = *c
		return nil
	})
	return found
}

// Events returns "Reason: message" of the core/v1 events about obj (matched by name in its
// namespace).
func (e *Env) Events(t testing.TB, obj client.Object) []string {
	t.Helper()
	var list corev1.EventList
	if err := e.Client.List(t.Context(), &list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range list.Items {
		if ev.InvolvedObject.Name == obj.GetName() {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

// WaitForEvent waits until an event about obj starts with prefix ("Reason" or "Reason: message
// start"). Events are recorded asynchronously: one may reach the API server after the condition
// it goes with, so a test never checks for one only once.
func (e *Env) WaitForEvent(t testing.TB, obj client.Object, prefix string) {
	t.Helper()
	Eventually(t, func() error {
		ev := e.Events(t, obj)
		if !slices.ContainsFunc(ev, func(s string) bool { return strings.HasPrefix(s, prefix) }) {
			return fmt.Errorf("no event about %s starting with %q: %v", obj.GetName(), prefix, ev)
		}
		return nil
	})
}
