package sidecar_test

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
