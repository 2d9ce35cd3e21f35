package sidecar

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestBucketFence: a grant inside keeps a Bucket from being doomed until it leaves; a doomed
// Bucket lets no grant in (and a grant on several Buckets, one of them doomed, enters none); a
// Bucket made again under a doomed one's name is another Bucket; a Bucket stays doomed for
// doomedFor after its deletion last looked. (The records a grant leaves pending are in
// TestBucketDeletionWaitsForAGrantTheCacheDoesNotShow, against a real API server.)
func TestBucketFence(t *testing.T) {
	bucket := func(name string, uid types.UID) *cosiapi.Bucket {
		return &cosiapi.Bucket{ObjectMeta: metav1.ObjectMeta{Name: name, UID: uid}}
	}
	a, b, c := bucket("a", "uid-a"), bucket("b", "uid-b"), bucket("c", "uid-c")
	var g grantBook
	doom := func(x *cosiapi.Bucket) bool {
		t.Helper()
		ok, err := g.doom(t.Context(), x)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}

	leave, doomed := g.enterFence(map[string]*cosiapi.Bucket{"claim-a": a, "claim-b": b})
	if leave == nil {
		t.Fatalf("a grant was refused on Buckets nobody deletes (doomed %q)", doomed)
	}
	if doom(a) {
		t.Fatal("Bucket a doomed while a grant on it is inside")
	}
	leave(nil)
	leave(nil) // twice is once
	if !doom(a) {
		t.Fatal("Bucket a not doomed once the grant left")
	}
	if l, d := g.enterFence(map[string]*cosiapi.Bucket{"claim-b": b, "claim-a": a}); l != nil || d != "a" {
		t.Fatalf("a grant on doomed Bucket a entered (doomed %q)", d)
	}
	if !doom(b) {
		t.Error("Bucket b not doomed: the refused grant holds it")
	}
	if l, _ := g.enterFence(map[string]*cosiapi.Bucket{"claim-c": c}); l == nil {
		t.Error("a grant on Bucket c was refused")
	}
	if l, _ := g.enterFence(map[string]*cosiapi.Bucket{"claim-a": bucket("a", "uid-a2")}); l == nil {
		t.Error("a grant on a new Bucket named a was refused")
	}

	g.fence.doomed["uid-a"] = time.Now().Add(-doomedFor - time.Second)
	if l, _ := g.enterFence(map[string]*cosiapi.Bucket{"claim-a": a}); l == nil {
		t.Errorf("a grant on Bucket a refused %s after its deletion last looked", doomedFor)
	}
	g.fence.doomed["uid-a"] = time.Now().Add(-doomedFor - time.Second)
	doom(b) // looks again: a is forgotten, b stays
	if _, ok := g.fence.doomed["uid-a"]; ok {
		t.Errorf("Bucket a still kept %s after its deletion last looked", doomedFor)
	}
	if _, ok := g.fence.doomed["uid-b"]; !ok {
		t.Error("Bucket b forgotten")
	}
}
