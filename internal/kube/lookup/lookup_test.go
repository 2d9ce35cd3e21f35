package lookup_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/kube/lookup"
)

// reader answers Get with a claim of the UID, NotFound ("" UID) or err; it counts its calls.
type reader struct {
	uid   types.UID
	err   error
	calls int
}

func (r *reader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	r.calls++
	switch {
	case r.err != nil:
		return r.err
	case r.uid == "":
		return apierrors.NewNotFound(schema.GroupResource{Group: cosiapi.GroupName, Resource: "bucketclaims"}, key.Name)
	}
	obj.SetUID(r.uid)
	return nil
}

func (r *reader) List(context.Context, client.ObjectList, ...client.ListOption) error {
	return errors.New("not used")
}

func TestConfirmGone(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name        string
		cache, live reader
		want        bool
		wantErr     error
		liveCalls   int
	}{
		{name: "in the cache", cache: reader{uid: "u"}, live: reader{uid: "u"}, want: false, liveCalls: 0},
		{name: "not cached yet", cache: reader{}, live: reader{uid: "u"}, want: false, liveCalls: 1},
		{name: "gone", cache: reader{}, live: reader{}, want: true, liveCalls: 1},
		{name: "replaced", cache: reader{uid: "other"}, live: reader{uid: "other"}, want: true, liveCalls: 1},
		{
			name:  "replaced in the cache, not yet live",
			cache: reader{uid: "other"}, live: reader{uid: "u"}, want: false, liveCalls: 1,
		},
		{name: "cache error", cache: reader{err: boom}, live: reader{}, wantErr: boom, liveCalls: 0},
		{name: "live error", cache: reader{}, live: reader{err: boom}, wantErr: boom, liveCalls: 1},
	} {
		claim := &cosiapi.BucketClaim{}
		gone, err := lookup.ConfirmGone(t.Context(), &tc.cache, &tc.live, client.ObjectKey{Namespace: "ns", Name: "c"}, claim,
			func() bool { return claim.UID == "u" })
		if gone != tc.want || !errors.Is(err, tc.wantErr) || tc.live.calls != tc.liveCalls {
			t.Errorf("%s: gone=%v err=%v live calls=%d; want %v, %v, %d", tc.name, gone, err, tc.live.calls, tc.want, tc.wantErr,
				tc.liveCalls)
		}
	}
}

func TestNamespaceGone(t *testing.T) {
	accesses := schema.GroupResource{Group: cosiapi.GroupName, Resource: "bucketaccesses"}
	for _, tc := range []struct {
		name          string
		err           error
		namespaceGone bool
		ignored       bool
	}{
		{name: "no error", err: nil, ignored: true},
		{name: "the object gone", err: apierrors.NewNotFound(accesses, "a"), ignored: true},
		// What the NamespaceLifecycle admission plugin answers a write into a namespace that is gone.
		{name: "its namespace gone", err: apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns"),
			namespaceGone: true},
		{name: "wrapped", err: fmt.Errorf("patching: %w",
			apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, "ns")), namespaceGone: true},
		{name: "another error", err: apierrors.NewConflict(accesses, "a", errors.New("changed"))},
		{name: "not an API error", err: errors.New("boom")},
	} {
		if got := lookup.NamespaceGone(tc.err); got != tc.namespaceGone {
			t.Errorf("%s: NamespaceGone = %v, want %v", tc.name, got, tc.namespaceGone)
		}
		if got := lookup.IgnoreGone(tc.err); (got == nil) != tc.ignored || (got != nil && !errors.Is(got, tc.err)) {
			t.Errorf("%s: IgnoreGone = %v, want ignored %v", tc.name, got, tc.ignored)
		}
	}
}
