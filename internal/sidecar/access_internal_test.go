package sidecar

import (
	"errors"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestNextStep: the step of an access follows from its hand-off, its deletion, its Buckets and its
// Provisioned condition, in that order.
func TestNextStep(t *testing.T) {
	const driver = "d.example.com"
	access := func(set func(*cosiapi.BucketAccess)) *cosiapi.BucketAccess {
		ba := &cosiapi.BucketAccess{}
		ba.Status.DriverName = driver
		ba.Status.AccessedBuckets = []cosiapi.AccessedBucket{{BucketName: "b", BucketClaimName: "c"}}
		set(ba)
		return ba
	}
	provisioned := func(ba *cosiapi.BucketAccess) {
		ba.Status.Conditions = []metav1.Condition{{Type: cosiapi.ConditionProvisioned, Status: metav1.ConditionTrue}}
	}
	deleting := func(ba *cosiapi.BucketAccess) { ba.DeletionTimestamp = &metav1.Time{Time: time.Now()} }
	for _, tc := range []struct {
		name string
		ba   *cosiapi.BucketAccess
		want accessStep
	}{
		{"another driver's", access(func(ba *cosiapi.BucketAccess) { ba.Status.DriverName = "other" }), stepNone},
		{"another driver's, being deleted", access(func(ba *cosiapi.BucketAccess) {
			deleting(ba)
			ba.Status.DriverName = "other"
		}), stepNone},
		{"no Buckets named yet", access(func(ba *cosiapi.BucketAccess) { ba.Status.AccessedBuckets = nil }), stepNone},
		{"handed off", access(func(*cosiapi.BucketAccess) {}), stepGrant},
		{"provisioned", access(provisioned), stepUpkeep},
		{"being deleted", access(deleting), stepRevoke},
		{"provisioned, being deleted", access(func(ba *cosiapi.BucketAccess) {
			provisioned(ba)
			deleting(ba)
		}), stepRevoke},
		{"being deleted before its Buckets are named", access(func(ba *cosiapi.BucketAccess) {
			deleting(ba)
			ba.Status.AccessedBuckets = nil
		}), stepRevoke},
	} {
		if got := nextStep(tc.ba, driver); got != tc.want {
			t.Errorf("%s: step %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestUpkeepResult: a part that failed in a way that is retried is retried, whatever the others
// did; a final failure stops the retries only when no other part waits, and does not cancel the
// wait of another.
func TestUpkeepResult(t *testing.T) {
	retried := rpcError{"DriverRotateBucketAccessCredentials", status.Error(codes.Unavailable, "down")}
	final := rpcError{"DriverGrantBucketAccess", status.Error(codes.InvalidArgument, "no")}
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "bucketaccesses"}, "a", errors.New("changed"))
	for _, tc := range []struct {
		name     string
		wait     time.Duration
		errs     []error
		want     reconcile.Result
		wantErr  bool
		terminal bool
	}{
		{name: "nothing failed", wait: time.Minute, want: reconcile.Result{RequeueAfter: time.Minute}},
		{name: "retried beats final", errs: []error{final, retried}, wantErr: true},
		{name: "final alone", errs: []error{final}, wantErr: true, terminal: true},
		{name: "final with a wait", wait: time.Hour, errs: []error{final},
			want: reconcile.Result{RequeueAfter: time.Hour}},
		{name: "final while another part waits for a Secret", errs: []error{errRequeue("later"), final},
			want: reconcile.Result{RequeueAfter: requeueDelay}},
		{name: "waiting for a Secret", wait: time.Hour, errs: []error{errRequeue("later")},
			want: reconcile.Result{RequeueAfter: requeueDelay}},
		{name: "conflict", wait: time.Hour, errs: []error{conflict, final},
			want: reconcile.Result{Requeue: true}}, //nolint:staticcheck // as requeue.Result
	} {
		got, err := upkeepResult(tc.wait, tc.errs)
		if (err != nil) != tc.wantErr || err != nil && errors.Is(err, reconcile.TerminalError(nil)) != tc.terminal {
			t.Errorf("%s: error %v, want error %v (terminal %v)", tc.name, err, tc.wantErr, tc.terminal)
		}
		if got != tc.want {
			t.Errorf("%s: result %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
