package cel

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cosiapi "github.com/kube-cosi/cosi/api/objectstorage/v1alpha2"
)

// TestImmutableStatusAgainstRawWrites: every raw write of the status subresource that removes or
// changes accountID, driverName, authenticationType, parameters (BucketAccess), bucketID (Bucket)
// or boundBucketName (BucketClaim) is refused, however status is sent: absent, null, {}, or
// without the field.
func TestImmutableStatusAgainstRawWrites(t *testing.T) {
	type probe struct {
		name  string
		typ   types.PatchType
		patch string
	}
	merge, jsonp := types.MergePatchType, types.JSONPatchType
	accessProbes := []probe{
		{"merge status null", merge, `{"status":null}`},
		{"merge accountID null", merge, `{"status":{"accountID":null}}`},
		{"merge driverName null", merge, `{"status":{"driverName":null}}`},
		{"merge authenticationType null", merge, `{"status":{"authenticationType":null}}`},
		{"merge parameters null", merge, `{"status":{"parameters":null}}`},
		{"merge parameters changed", merge, `{"status":{"parameters":{"policy":"loose"}}}`},
		{"merge parameters extra", merge, `{"status":{"parameters":{"x":"y"}}}`},
		{"merge accountID changed", merge, `{"status":{"accountID":"other"}}`},
		{"json remove status", jsonp, `[{"op":"remove","path":"/status"}]`},
		{"json status {}", jsonp, `[{"op":"replace","path":"/status","value":{}}]`},
		{"json status null", jsonp, `[{"op":"replace","path":"/status","value":null}]`},
		{"json remove accountID", jsonp, `[{"op":"remove","path":"/status/accountID"}]`},
		{"json accountID empty", jsonp, `[{"op":"replace","path":"/status/accountID","value":""}]`},
		{"json parameters {}", jsonp, `[{"op":"replace","path":"/status/parameters","value":{}}]`},
		{"json remove parameters", jsonp, `[{"op":"remove","path":"/status/parameters"}]`},
		{"json status only conditions", jsonp, `[{"op":"replace","path":"/status","value":{"conditions":[]}}]`},
	}
	for _, p := range accessProbes {
		t.Run("BucketAccess/"+p.name, func(t *testing.T) {
			t.Parallel()
			a := newBucketAccess(uniqueName("sa"))
			if err := env.Client.Create(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			handedOff(a)
			a.Status.AccountID = "ba-1234"
			if err := env.Client.Status().Update(t.Context(), a); err != nil {
				t.Fatal(err)
			}
			before := a.Status
			err := env.Client.Status().Patch(t.Context(), a, client.RawPatch(p.typ, []byte(p.patch)))
			got := &cosiapi.BucketAccess{}
			if gerr := env.Client.Get(t.Context(), client.ObjectKeyFromObject(a), got); gerr != nil {
				t.Fatal(gerr)
			}
			if got.Status.AccountID != before.AccountID || got.Status.DriverName != before.DriverName ||
				got.Status.AuthenticationType != before.AuthenticationType ||
				len(got.Status.Parameters) != len(before.Parameters) || got.Status.Parameters["policy"] != "strict" {
				t.Errorf("accepted (%v): status now %+v", err, got.Status)
			}
		})
	}
	for _, p := range []probe{
		{"merge status null", merge, `{"status":null}`},
		{"merge boundBucketName null", merge, `{"status":{"boundBucketName":null}}`},
		{"json remove status", jsonp, `[{"op":"remove","path":"/status"}]`},
		{"json status {}", jsonp, `[{"op":"replace","path":"/status","value":{}}]`},
		{"json boundBucketName empty", jsonp, `[{"op":"replace","path":"/status/boundBucketName","value":""}]`},
	} {
		t.Run("BucketClaim/"+p.name, func(t *testing.T) {
			t.Parallel()
			c := newBucketClaim(uniqueName("sc"))
			if err := env.Client.Create(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			c.Status.BoundBucketName = "bc-1"
			if err := env.Client.Status().Update(t.Context(), c); err != nil {
				t.Fatal(err)
			}
			err := env.Client.Status().Patch(t.Context(), c, client.RawPatch(p.typ, []byte(p.patch)))
			got := &cosiapi.BucketClaim{}
			if gerr := env.Client.Get(t.Context(), client.ObjectKeyFromObject(c), got); gerr != nil {
				t.Fatal(gerr)
			}
			if got.Status.BoundBucketName != "bc-1" {
				t.Errorf("accepted (%v): status now %+v", err, got.Status)
			}
		})
	}
	for _, p := range []probe{
		{"merge status null", merge, `{"status":null}`},
		{"merge bucketID null", merge, `{"status":{"bucketID":null}}`},
		{"json remove status", jsonp, `[{"op":"remove","path":"/status"}]`},
		{"json status {}", jsonp, `[{"op":"replace","path":"/status","value":{}}]`},
	} {
		t.Run("Bucket/"+p.name, func(t *testing.T) {
			t.Parallel()
			b := newBucket(uniqueName("sb"))
			if err := env.Client.Create(t.Context(), b); err != nil {
				t.Fatal(err)
			}
			b.Status.BucketID = "id-1"
			if err := env.Client.Status().Update(t.Context(), b); err != nil {
				t.Fatal(err)
			}
			err := env.Client.Status().Patch(t.Context(), b, client.RawPatch(p.typ, []byte(p.patch)))
			got := &cosiapi.Bucket{}
			if gerr := env.Client.Get(t.Context(), client.ObjectKeyFromObject(b), got); gerr != nil {
				t.Fatal(gerr)
			}
			if got.Status.BucketID != "id-1" {
				t.Errorf("accepted (%v): status now %+v", err, got.Status)
			}
		})
	}
}
