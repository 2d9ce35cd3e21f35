package sanity

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	"github.com/kube-cosi/cosi/pkg/driver"
	"github.com/kube-cosi/cosi/pkg/driver/driverclient"
	"github.com/kube-cosi/cosi/pkg/driver/v1alpha1"
)

// A driver that speaks only cosi.v1alpha1 (every driver published before KEP-1979 v1alpha2) is
// tested with v1alpha1Cases: the v1alpha1 spec's requirements (idempotent create, ALREADY_EXISTS on
// different parameters, grant and revoke, idempotent delete and revoke, the error scheme, checked
// on every call by the suite's interceptor), and what this project's sidecar adapter needs of it
// to drive it (docs/v1alpha1-drivers.md): bucket_id is the name it is given, and credentials come
// under the keys the upstream v1alpha1 sidecar read, or their aliases (v1alpha1.S3Keys).

// detect settles the driver's protocol, waiting for the driver as the sidecar does.
func (s *suite) detect(ctx context.Context) error {
	for {
		protocol, err := driverclient.DetectProtocol(ctx, s.conn)
		if err == nil {
			s.protocol = protocol
			return nil
		}
		if !driver.Retryable(err) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// runnable are the cases for the driver's protocol.
func (s *suite) runnable() []Case {
	if s.protocol == driverclient.ProtocolV1alpha1 {
		return v1alpha1Cases
	}
	n := s.cfg.Sequences
	switch {
	case n == 0:
		n = DefaultSequences
	case n < 0:
		n = 0
	}
	return slices.Concat(cases, sequenceCases(n), s.cfg.ExtraCases)
}

// V1alpha1Cases lists the cases run against a v1alpha1 driver.
func V1alpha1Cases() []Case { return v1alpha1Cases }

func (t *T) v1() v1.ProvisionerClient { return v1.NewProvisionerClient(t.s.conn) }

// v1CreateBucket creates a bucket and deletes it when the case ends.
func (t *T) v1CreateBucket() (string, *v1.DriverCreateBucketResponse) {
	name := t.name("b")
	resp, err := t.v1().
		DriverCreateBucket(t.ctx, &v1.DriverCreateBucketRequest{Name: name, Parameters: t.s.cfg.BucketParameters})
	t.ok(err, "DriverCreateBucket")
	t.Cleanup(func() {
		_, _ = t.v1().DriverDeleteBucket(t.ctx, &v1.DriverDeleteBucketRequest{BucketId: resp.GetBucketId()})
	})
	return name, resp
}

// v1Grant grants a key to bucketID and revokes it when the case ends, by the account_id returned
// (the name when that is empty, as the sidecar's adapter takes it).
func (t *T) v1Grant(bucketID string) *v1.DriverGrantBucketAccessResponse {
	name := t.name("a")
	resp, err := t.v1().DriverGrantBucketAccess(t.ctx, &v1.DriverGrantBucketAccessRequest{
		BucketId: bucketID, Name: name, AuthenticationType: v1.AuthenticationType_Key, Parameters: t.s.cfg.AccessParameters,
	})
	t.ok(err, "DriverGrantBucketAccess")
	t.Cleanup(func() {
		_, _ = t.v1().DriverRevokeBucketAccess(
			t.ctx,
			&v1.DriverRevokeBucketAccessRequest{BucketId: bucketID, AccountId: cmp.Or(resp.GetAccountId(), name)},
		)
	})
	return resp
}

var v1alpha1Cases = []Case{
	{Name: "v1alpha1/DriverGetInfo/valid-name", run: func(t *T) {
		info, err := v1.NewIdentityClient(t.s.conn).DriverGetInfo(t.ctx, &v1.DriverGetInfoRequest{})
		t.ok(err, "DriverGetInfo")
		if err := driver.ValidateDriverName(info.GetName()); err != nil {
			t.Errorf("%v", err)
		}
	}},
	{Name: "v1alpha1/DriverCreateBucket/idempotent", run: func(t *T) {
		name, first := t.v1CreateBucket()
		again, err := t.v1().
			DriverCreateBucket(t.ctx, &v1.DriverCreateBucketRequest{Name: name, Parameters: t.s.cfg.BucketParameters})
		t.ok(err, "DriverCreateBucket again with the same name and parameters (the v1alpha1 spec requires OK)")
		if again.GetBucketId() != first.GetBucketId() {
			t.Errorf("bucket_id %q the second time, %q the first", again.GetBucketId(), first.GetBucketId())
		}
	}},
	{Name: "v1alpha1/DriverCreateBucket/bucket-id-is-the-name", run: func(t *T) {
		name, resp := t.v1CreateBucket()
		if resp.GetBucketId() != name {
			t.Errorf(
				"bucket_id %q for name %q: the sidecar's v1alpha1 adapter addresses buckets by name "+
					"and refuses this driver's buckets",
				resp.GetBucketId(),
				name,
			)
		}
	}},
	{Name: "v1alpha1/DriverCreateBucket/incompatible-parameters", run: func(t *T) {
		if t.s.cfg.IncompatibleBucketParameters == nil {
			t.Skipf("no IncompatibleBucketParameters configured")
		}
		name, _ := t.v1CreateBucket()
		_, err := t.v1().DriverCreateBucket(
			t.ctx,
			&v1.DriverCreateBucketRequest{Name: name, Parameters: t.s.cfg.IncompatibleBucketParameters},
		)
		t.code(err, "DriverCreateBucket with the same name and other parameters", codes.AlreadyExists)
	}},
	{Name: "v1alpha1/DriverCreateBucket/invalid-parameters", run: func(t *T) {
		if t.s.cfg.InvalidBucketParameters == nil {
			t.Skipf("no InvalidBucketParameters configured")
		}
		_, err := t.v1().DriverCreateBucket(
			t.ctx,
			&v1.DriverCreateBucketRequest{Name: t.name("b"), Parameters: t.s.cfg.InvalidBucketParameters},
		)
		t.code(err, "DriverCreateBucket with invalid parameters", codes.InvalidArgument)
	}},
	{Name: "v1alpha1/DriverCreateBucket/missing-name", run: func(t *T) {
		_, err := t.v1().DriverCreateBucket(t.ctx, &v1.DriverCreateBucketRequest{Parameters: t.s.cfg.BucketParameters})
		t.code(err, "DriverCreateBucket without a name", codes.InvalidArgument)
	}},
	{Name: "v1alpha1/DriverDeleteBucket/idempotent", run: func(t *T) {
		_, resp := t.v1CreateBucket()
		for i := range 2 {
			_, err := t.v1().DriverDeleteBucket(t.ctx, &v1.DriverDeleteBucketRequest{BucketId: resp.GetBucketId()})
			t.ok(err, fmt.Sprintf("DriverDeleteBucket, call %d", i+1))
		}
	}},
	{Name: "v1alpha1/DriverGrantBucketAccess/credentials", run: func(t *T) {
		_, bucket := t.v1CreateBucket()
		// An account_id other than the name is the driver's choice, which the sidecar records and
		// revokes by (docs/v1alpha1-drivers.md, "Drivers that name their accounts").
		resp := t.v1Grant(bucket.GetBucketId())
		s3 := resp.GetCredentials()[v1alpha1.CredentialsS3].GetSecrets()
		az := resp.GetCredentials()[v1alpha1.CredentialsAzure].GetSecrets()
		gcs := resp.GetCredentials()[v1alpha1.CredentialsGCS].GetSecrets()
		switch {
		case s3 != nil:
			checkS3Secrets(t, s3)
		case az != nil:
			if az[v1alpha1.AzureAccessToken] == "" {
				t.Errorf("credentials[%q].secrets[%q] is empty", v1alpha1.CredentialsAzure, v1alpha1.AzureAccessToken)
			}
		case gcs != nil:
		default:
			t.Errorf(
				"credentials has none of %q, %q, %q",
				v1alpha1.CredentialsS3,
				v1alpha1.CredentialsAzure,
				v1alpha1.CredentialsGCS,
			)
		}
	}},
	{Name: "v1alpha1/DriverRevokeBucketAccess/idempotent", run: func(t *T) {
		_, bucket := t.v1CreateBucket()
		grant := t.v1Grant(bucket.GetBucketId())
		for i := range 2 {
			_, err := t.v1().DriverRevokeBucketAccess(
				t.ctx,
				&v1.DriverRevokeBucketAccessRequest{BucketId: bucket.GetBucketId(), AccountId: grant.GetAccountId()},
			)
			t.ok(err, fmt.Sprintf("DriverRevokeBucketAccess, call %d", i+1))
		}
	}},
	{Name: "v1alpha1/DriverRevokeBucketAccess/never-granted", run: func(t *T) {
		_, bucket := t.v1CreateBucket()
		_, err := t.v1().DriverRevokeBucketAccess(
			t.ctx,
			&v1.DriverRevokeBucketAccessRequest{BucketId: bucket.GetBucketId(), AccountId: t.name("a")},
		)
		t.code(
			err,
			"DriverRevokeBucketAccess for an account never granted (NOT_FOUND is accepted: the adapter treats it as OK)",
			codes.OK,
			codes.NotFound,
		)
	}},
}

// checkS3Secrets checks an S3 grant's secrets as the sidecar's adapter reads them: each value under
// its key or one of the key's aliases (v1alpha1.S3Keys), never two different values. An endpoint or
// region left out fails too, saying what the sidecar then needs: the admin's fallback.
func checkS3Secrets(t *T, s3 map[string]string) {
	for _, keys := range v1alpha1.S3Keys() {
		var values []string
		for _, k := range keys {
			if v := s3[k]; v != "" && !slices.Contains(values, v) {
				values = append(values, v)
			}
		}
		switch {
		case len(values) > 1:
			t.Errorf("credentials[%q].secrets: %s hold different values: the sidecar refuses the answer as ambiguous",
				v1alpha1.CredentialsS3, strings.Join(keys, ", "))
		case len(values) == 1:
		case keys[0] == v1alpha1.S3Endpoint || keys[0] == v1alpha1.S3Region:
			param, flag := v1alpha1.ParameterS3Endpoint, v1alpha1.FlagS3Endpoint
			if keys[0] == v1alpha1.S3Region {
				param, flag = v1alpha1.ParameterS3Region, v1alpha1.FlagS3Region
			}
			t.Errorf("credentials[%q].secrets[%q] is empty: the sidecar refuses the answer unless the admin "+
				"declares it, with the class parameter %s or the sidecar's %s", v1alpha1.CredentialsS3, keys[0], param, flag)
		default:
			t.Errorf("credentials[%q].secrets: none of %s holds a value: the Secret would lack it",
				v1alpha1.CredentialsS3, strings.Join(keys, ", "))
		}
	}
}
