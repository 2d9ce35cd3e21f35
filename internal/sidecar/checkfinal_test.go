package sidecar_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/internal/testenv"
	"github.com/kube-cosi/cosi/pkg/driver/memory"
)

// TestChecksGoOnAfterAFinalErrorInACheck: a Secret check whose rewrite of a lost Secret fails with
// a final driver code (InvalidArgument, once) does not end the access's checks: the next interval's
// check writes the Secret. The check's dueAt put the access in woken (its check runs); the
// TerminalError is not retried and nothing calls done, so wakeDue never queues it again. Fails on
// 92b41a8 (and on 0befd59^, where the terminal error left no RequeueAfter either).
func TestChecksGoOnAfterAFinalErrorInACheck(t *testing.T) {
	t.Parallel()
	h := newHarness(t, memory.Config{})
	ba := provisioned(t, h.access(cosiapi.ProtocolS3, cosiapi.AuthenticationTypeKey,
		h.provisionedBucket(cosiapi.ProtocolS3)), accessConditions)
	s := secret(t, ba, 0)
	h.faults.Set(0, memory.Fault{Method: "DriverGrantBucketAccess", Code: codes.InvalidArgument, Count: 1})
	if err := env.Client.Delete(t.Context(), s); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, func() error {
		if h.calls.Count("DriverGrantBucketAccess") < 2 {
			return fmt.Errorf("the check has not asked the driver again yet")
		}
		return nil
	})
	testenv.Eventually(t, func() error {
		again := &corev1.Secret{}
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), again); err != nil {
			return fmt.Errorf("the lost Secret is not written again after the failed rewrite: %w", err)
		}
		if again.UID == s.UID {
			return fmt.Errorf("the old Secret is still there")
		}
		return nil
	})
}
