package lookup_test

import (
	"context"
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/lookup"
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
