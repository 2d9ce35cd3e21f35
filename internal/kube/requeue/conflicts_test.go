package requeue_test

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/requeue"
)

// Issue 25, item 9: update conflicts delay an object's work (it is retried), and the KEP lists
// them among the Kubernetes API issues reported as events: each object's conflicts are reported,
// rate-limited rather than dropped.
func TestConflictsAreReportedRateLimited(t *testing.T) {
	conflict := apierrors.NewConflict(gr, "b", errors.New("the object has been modified"))
	rec := events.NewFakeRecorder(100)
	a := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: "a", UID: "uid-a"}}
	b := &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: "b", UID: "uid-b"}}
	for range 5 {
		for _, obj := range []*cosiapi.Bucket{a, b} {
			if _, err := requeue.ResultWithEvent(rec, obj, cosiapi.EventFailedCreateBucket, conflict); err != nil {
				t.Fatalf("a conflict is retried without an error, got %v", err)
			}
		}
	}
	var got []string
	for done := false; !done; {
		select {
		case e := <-rec.Events:
			got = append(got, e)
		default:
			done = true
		}
	}
	if len(got) != 2 {
		t.Fatalf("10 conflicts on 2 objects made %d events, want one per object (rate-limited): %q", len(got), got)
	}
	for _, e := range got {
		if !strings.HasPrefix(e, "Normal "+cosiapi.EventUpdateConflict) || !strings.Contains(e, "conflict") {
			t.Errorf("event %q, want a Normal %s about the conflict", e, cosiapi.EventUpdateConflict)
		}
	}
}
