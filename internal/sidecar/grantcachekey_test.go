package sidecar_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/testenv"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// TestCachedGrantKeyIsNoConfigMapKey: the API server refuses a ConfigMap with the key under which
// the sidecar's cache keeps what it reads of a grant record, so what the cache shows under it was
// put there by the cache's transform: nobody who can write ConfigMaps in the grant namespace can
// make the cache show a record the API server does not hold.
func TestCachedGrantKeyIsNoConfigMapKey(t *testing.T) {
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, GenerateName: "cached-grant-"},
		Data:       map[string]string{sidecar.CachedGrantKey: `{"ns":"apps","n":"a","a":"account"}`},
	}
	err := env.Client.Create(context.Background(), cm)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("create of a ConfigMap with key %q: %v, want Invalid", sidecar.CachedGrantKey, err)
	}
}

// TestSidecarCacheKeepsWhatItReadsOfRecords: the sidecar's cache (its options, as the sidecar
// starts it) holds of a grant record only what it reads (under CachedGrantKey), not the record,
// and the driver's records only.
func TestSidecarCacheKeepsWhatItReadsOfRecords(t *testing.T) {
	ctx := t.Context()
	driverLabel := uniqueName("cache-options") + ".memory.cosi.io"
	uid := uuid.NewUUID()
	record := `{"namespace":"apps","name":"a","uid":"` + string(uid) + `","accountID":"ba-1",` +
		`"protocol":"S3","authenticationType":"Key","bucketIDs":["b"],"bucketNames":["b"],` +
		`"bucketInfo":{"b":{"COSI_S3_BUCKET_NAME":"b"}}}`
	for _, cm := range []*corev1.ConfigMap{
		{
			ObjectMeta: metav1.ObjectMeta{
				Namespace: sidecarNamespace, Name: "cosi-grant-" + string(uid),
				Labels: map[string]string{cosiapi.LabelGrantDriver: driverLabel},
			},
			Data: map[string]string{"grant.json": record},
		},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: sidecarNamespace, Name: uniqueName("cosi-grant-another-driver"),
				Labels: map[string]string{cosiapi.LabelGrantDriver: "another." + driverLabel}},
			Data: map[string]string{"grant.json": record},
		},
	} {
		if err := env.Client.Create(ctx, cm); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), cm) })
	}
	opts := sidecar.CacheOptions(sidecarNamespace, driverLabel)
	opts.Scheme = env.Scheme
	c, err := cache.New(env.Config, opts)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("the cache did not sync")
	}
	var list corev1.ConfigMapList
	testenv.Eventually(t, func() error {
		if err := c.List(ctx, &list, client.InNamespace(sidecarNamespace)); err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d records cached, want 1", len(list.Items))
		}
		return nil
	})
	data := list.Items[0].Data
	if _, ok := data[sidecar.CachedGrantKey]; !ok || len(data) != 1 {
		t.Errorf("the cached record holds %v, want only %s", slices.Sorted(maps.Keys(data)), sidecar.CachedGrantKey)
	}
}
