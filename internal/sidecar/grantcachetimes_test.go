package sidecar

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/cache/slim"
)

// TestCachedGrantKeepsHandWrittenTimes: the cache's copy of a record holds the record's times as
// every read of the whole record has them, whatever form the record writes them in. The sidecar
// writes them in UTC to the second; an admin of COSI's namespace may write any time that an RFC
// 3339 read accepts: a fraction of a second, the zero time, another zone. The copy writes them
// again in UTC to the second: it drops the fraction (a renewal due or not), turns the zero time into
// none (a rotation period counted from the record's creation instead), and writes a time of
// another zone near year 0 or 10000 in a year it cannot read back (no record at all in the cache:
// no orphan revoked, no Bucket waiting for the grant).
func TestCachedGrantKeepsHandWrittenTimes(t *testing.T) {
	transform := slim.Transform(compactGrantRecord)
	created := metav1.NewTime(time.Now().Truncate(time.Second))
	for _, tc := range []struct{ name, fields string }{
		{"fraction", `"expiryFrom":"2026-01-01T00:00:00.1Z","expiry":"2026-01-01T00:00:00.9Z"`},
		{"zero", `"periodFrom":"0001-01-01T00:00:00Z"`},
		{"zone near 10000", `"periodFrom":"9999-12-31T23:00:00-05:00"`},
		{"zone near 0", `"periodFrom":"0000-01-01T00:30:00+01:00"`},
		{"rotation written", `"rotation":{"from":"a","to":"b","written":"0001-01-01T00:00:00Z"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{
					Namespace: "cosi-system", Name: grantRecordName("u"), CreationTimestamp: created,
				},
				Data: map[string]string{grantDataKey: `{"uid":"u","namespace":"apps","name":"a","accountID":"ba-u",` +
					`"bucketNames":["b"],` + tc.fields + `}`},
			}
			want, err := cachedGrantOf(whole)
			if err != nil {
				t.Fatalf("the whole record: %v", err)
			}
			out, err := transform(whole.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			cm := out.(*corev1.ConfigMap)
			got, err := cachedGrantOf(cm)
			if err != nil {
				t.Fatalf("the cache shows no record of %v: %v", whole.Data, err)
			}
			for _, f := range []struct {
				name      string
				got, want *metav1.Time
			}{
				{"periodFrom", got.PeriodFrom, want.PeriodFrom},
				{"expiry", got.Expiry, want.Expiry},
				{"expiryFrom", got.ExpiryFrom, want.ExpiryFrom},
				{"rotation.written", written(got.Rotation), written(want.Rotation)},
			} {
				if (f.got == nil) != (f.want == nil) || f.got != nil && !f.got.Equal(f.want) {
					t.Errorf("%s: cached %v, the record %v", f.name, f.got, f.want)
				}
			}
			// The decisions made on them.
			ba := &cosiapi.BucketAccess{}
			const period = 24 * time.Hour
			if gotDue, _ := rotationDue(ba, &got.rotationState, cm, period); gotDue != func() bool {
				due, _ := rotationDue(ba, &want.rotationState, whole, period)
				return due
			}() {
				t.Errorf("rotation due on the cached copy: %v, on the record: %v", gotDue, !gotDue)
			}
			if g, w := renewal(got.ExpiryFrom, got.Expiry), renewal(want.ExpiryFrom, want.Expiry); !g.Equal(w) {
				t.Errorf("renewal on the cached copy at %v, on the record at %v", g, w)
			}
		})
	}
}

func written(r *rotation) *metav1.Time {
	if r == nil {
		return nil
	}
	return r.Written
}
