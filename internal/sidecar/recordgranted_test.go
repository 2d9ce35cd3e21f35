package sidecar_test

import (
	"context"
	"slices"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
	"github.com/kube-cosi/cosi/dev/objects"
	"github.com/kube-cosi/cosi/internal/kube/conditions"
	"github.com/kube-cosi/cosi/internal/sidecar"
)

// TestRecordGrantedOnAReplacedAccess: an access granted, then deleted by its tenant (finalizers
// removed) and created again under its name while the grant was being recorded, so that the
// record's status patch conflicts: the retry reads the name again and finds the new access, which
// was never granted. Nothing is recorded on it: it is not marked Provisioned ("Secrets written")
// on the old one's grant, and its Secret checks are not started as if its Secrets were written.
func TestRecordGrantedOnAReplacedAccess(t *testing.T) {
	ctx := t.Context()
	name := uniqueName("replaced")
	old := objects.BucketAccess(testNamespace, name, "class", objects.Grant("claim", name, objects.ReadWrite))
	if err := env.Client.Create(ctx, old); err != nil {
		t.Fatal(err)
	}
	var replacement *cosiapi.BucketAccess
	replaced := false
	watching, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	replace := func(ctx context.Context) {
		if !replaced {
			replaced = true
			if err := env.Client.Delete(ctx, old); err != nil {
				t.Fatal(err)
			}
			replacement = objects.BucketAccess(testNamespace, name, "class",
				objects.Grant("claim", name, objects.ReadWrite))
			if err := env.Client.Create(ctx, replacement); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), replacement) })
		}
	}
	c := interceptor.NewClient(watching, interceptor.Funcs{
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch,
			opts ...client.SubResourcePatchOption,
		) error {
			replace(ctx)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object,
			opts ...client.SubResourceUpdateOption,
		) error {
			replace(ctx)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
	})
	granted := old.DeepCopy()
	checked, err := sidecar.RecordGranted(ctx, c, env.Client, granted)
	if err != nil {
		t.Fatal(err)
	}
	if !replaced {
		t.Fatal("the status write was never made")
	}
	live := &cosiapi.BucketAccess{}
	if err := env.Client.Get(ctx, client.ObjectKeyFromObject(old), live); err != nil {
		t.Fatal(err)
	}
	if live.UID != replacement.UID {
		t.Fatalf("the name holds %s, not the replacement %s", live.UID, replacement.UID)
	}
	if conditions.IsTrue(live, cosiapi.ConditionProvisioned) {
		t.Errorf("the replacement, never granted, is Provisioned: %v", live.Status.Conditions)
	}
	if slices.Contains(checked, replacement.UID) {
		t.Errorf("the replacement's Secret checks were scheduled as if its Secrets were written: %v", checked)
	}
	if granted.UID != old.UID {
		t.Errorf("the granted access's copy now holds %s: the caller forgets the answers of the wrong access",
			granted.UID)
	}
}
