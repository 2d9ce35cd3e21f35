package s3_test

import (
	"slices"
	"testing"

	"github.com/go-logr/logr"

	"github.com/kube-cosi/cosi/drivers/s3"
	"github.com/kube-cosi/cosi/pkg/sanity"
	"github.com/kube-cosi/cosi/pkg/sanity/s3probe"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// TestS3Probe checks the probe an S3 vendor imports (pkg/sanity/s3probe) against each real store,
// keeping the sanity.Probe contract: AccountOf names the identity a granted key authenticates as,
// as the account back-end lists it, and "" once revoked; Allowed tells a granted access from a
// denied one, and is false with a nil error for a revoked key and for a bucket that does not
// exist; BucketExists is false for a deleted bucket.
func TestS3Probe(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b *backend) {
		ctx := t.Context()
		d := b.newDriver(t, "")
		_, p := serve(t, d, logr.Discard())
		accounts := b.newAccount()
		probe, err := s3probe.New(s3probe.Config{Endpoint: b.s3Endpoint, Credentials: b.creds, Accounts: accounts.List})
		if err != nil {
			t.Fatal(err)
		}
		// The probe leaves an object in the bucket: purge on delete.
		params := map[string]string{s3.ParamPurgeOnDelete: "true"}
		bucket := createBucket(t, p, params)
		before, err := accounts.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		a := grant(t, p, &cosiproto.AccessModes{ObjectData: cosiproto.AccessMode_READ_ONLY}, bucket)
		after, err := accounts.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		who, err := probe.AccountOf(ctx, a.creds)
		if err != nil || !slices.Contains(after, who) || slices.Contains(before, who) {
			t.Errorf("AccountOf: %q, %v; want the account the grant added (accounts before %v, after %v)",
				who, err, before, after)
		}
		check := func(c sanity.Category, write bool) sanity.AccessCheck {
			return sanity.AccessCheck{
				Protocol: cosiproto.ObjectProtocol_S3, Credentials: a.creds, BucketID: bucket,
				BucketInfo: a.infos[bucket], Category: c, Write: write,
			}
		}
		for _, tc := range []struct {
			category sanity.Category
			write    bool
			want     bool
		}{
			{sanity.ObjectData, false, true},
			{sanity.ObjectData, true, false},
			{sanity.ObjectMetadata, true, false},
			{sanity.BucketMetadata, true, false},
		} {
			if got, err := probe.Allowed(ctx, check(tc.category, tc.write)); got != tc.want || err != nil {
				t.Errorf("Allowed(%v, write %v) of a READ_ONLY object-data grant: %v, %v; want %v",
					tc.category, tc.write, got, err, tc.want)
			}
		}

		revoke(t, p, a)
		if who, err := probe.AccountOf(ctx, a.creds); who != "" || err != nil {
			t.Errorf("AccountOf a revoked key: %q, %v; want none", who, err)
		}
		if got, err := probe.Allowed(ctx, check(sanity.ObjectData, false)); got || err != nil {
			t.Errorf("Allowed with a revoked key: %v, %v; want false, no error", got, err)
		}

		deletion := &cosiproto.DriverDeleteBucketRequest{BucketId: bucket, Parameters: params}
		if _, err := p.DriverDeleteBucket(ctx, deletion); err != nil {
			t.Fatal(err)
		}
		if exists, err := probe.BucketExists(ctx, bucket); exists || err != nil {
			t.Errorf("BucketExists of a deleted bucket: %v, %v", exists, err)
		}
		missing := check(sanity.ObjectData, false)
		if got, err := probe.Allowed(ctx, missing); got || err != nil {
			t.Errorf("Allowed on a bucket that does not exist: %v, %v; want false, no error", got, err)
		}
	})
}
