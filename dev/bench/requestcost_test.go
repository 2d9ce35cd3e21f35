package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
)

// requestWriters is how many goroutines send each kind of request, as the benchmark's writers.
const requestWriters = 8

// BenchmarkRequestCost measures the API server's CPU per request (apiserver-ms/op) for each kind
// of request an access makes, on a fresh API server with the COSI CRDs and nothing watching (a
// watcher adds the encoding of each write's event): which writes are worth removing, and what a
// merge patch costs against an update (make bench-requests; docs/benchmark.md). Run it with a
// fixed count (-benchtime 1200x): the API server's CPU is read before and after the requests.
func BenchmarkRequestCost(b *testing.B) {
	env, err := testenv.Start()
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.APIServer.Stop() }()
	ctx := context.Background()
	c := env.APIServer.Client
	const ns = "requests"
	if err := env.APIServer.CreateNamespace(ctx, ns); err != nil {
		b.Fatal(err)
	}
	accesses := make([]*cosiapi.BucketAccess, requestWriters)
	for i := range accesses {
		if accesses[i], err = handedOffAccess(ctx, c, ns, fmt.Sprintf("access-%d", i)); err != nil {
			b.Fatal(err)
		}
	}
	var seq atomic.Int64
	record := fmt.Sprintf(`{"namespace":%q,"name":"access","accountID":"ba-%036d","bucketIDs":["bc-%036d"]}`, ns, 0, 0)
	for _, k := range []struct {
		name string
		do   func(w int) error
	}{
		{"PUT bucketaccesses/status", func(w int) error {
			ba := accesses[w]
			conditions.MarkTrue(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, fmt.Sprint(seq.Add(1)))
			return c.Status().Update(ctx, ba)
		}},
		{"PATCH bucketaccesses/status (merge, locked)", func(w int) error {
			ba := accesses[w]
			before := ba.DeepCopy()
			conditions.MarkTrue(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioned, fmt.Sprint(seq.Add(1)))
			return c.Status().Patch(ctx, ba, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{}))
		}},
		{"PUT bucketaccesses", func(w int) error {
			ba := accesses[w]
			ba.Labels = map[string]string{"n": fmt.Sprint(seq.Add(1))}
			return c.Update(ctx, ba)
		}},
		{"GET bucketaccesses", func(w int) error {
			return c.Get(ctx, client.ObjectKeyFromObject(accesses[w]), &cosiapi.BucketAccess{})
		}},
		{"POST+PUT configmaps", func(int) error {
			cm := &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("record-%d", seq.Add(1))},
				Data:       map[string]string{"grant.json": record},
			}
			if err := c.Create(ctx, cm); err != nil {
				return err
			}
			cm.Data["grant.json"] = record + " "
			return c.Update(ctx, cm)
		}},
		{"PATCH secrets 404", func(int) error {
			s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("none-%d", seq.Add(1))}}
			probe := []byte(`[{"op":"test","path":"/metadata/name","value":"x"}]`)
			err := c.Patch(ctx, s, client.RawPatch(types.JSONPatchType, probe))
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("patch of a missing Secret: %w", err)
		}},
		{"POST secrets", func(int) error {
			return c.Create(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("creds-%d", seq.Add(1))},
				StringData: map[string]string{"accessKeyId": "AKIA0000", "secretAccessKey": "0000"},
			})
		}},
	} {
		b.Run(k.name, func(b *testing.B) {
			before := childCPU()["kube-apiserver"]
			var next atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			b.ResetTimer()
			for w := range requestWriters {
				wg.Go(func() {
					for next.Add(1) <= int64(b.N) {
						if err := k.do(w); err != nil {
							failed.CompareAndSwap(nil, err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, ok := failed.Load().(error); ok {
				b.Fatal(err)
			}
			b.ReportMetric((childCPU()["kube-apiserver"]-before)*1000/float64(b.N), "apiserver-ms/op")
		})
	}
}

// handedOffAccess creates an access with the status the controller's hand-off and phase 1 give it.
func handedOffAccess(ctx context.Context, c client.Client, ns, name string) (*cosiapi.BucketAccess, error) {
	ba := &cosiapi.BucketAccess{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Finalizers: []string{cosiapi.FinalizerProtection}},
		Spec: cosiapi.BucketAccessSpec{
			BucketAccessClassName: "class", Protocol: cosiapi.ProtocolS3,
			BucketClaims: []cosiapi.BucketClaimAccess{{
				BucketClaimName: "claim", AccessSecretName: name + "-creds",
				AccessModes: cosiapi.BucketAccessModes{ObjectData: cosiapi.BucketAccessModeReadWrite},
			}},
		},
	}
	if err := c.Create(ctx, ba); err != nil {
		return nil, err
	}
	ba.Status = cosiapi.BucketAccessStatus{
		DriverName: "bench.cosi.io", AuthenticationType: cosiapi.AuthenticationTypeKey,
		Parameters:      map[string]string{"class": "standard"},
		AccountID:       "ba-" + string(ba.UID),
		AccessedBuckets: []cosiapi.AccessedBucket{{BucketClaimName: "claim", BucketName: "bc-1", BucketID: "bc-1"}},
	}
	conditions.MarkUnknown(ba, cosiapi.ConditionProvisioned, cosiapi.ReasonProvisioning, "granting")
	return ba, c.Status().Update(ctx, ba)
}
