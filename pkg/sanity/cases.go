package sanity

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/kube-cosi/cosi/pkg/driver"
	cosiproto "github.com/kube-cosi/cosi/proto"
)

// The cases of DriverGetBucketUsage (COSI's extension), named for package mutants.
const (
	caseUsageUnadvertised = "DriverGetBucketUsage/answers Unimplemented unless BUCKET_USAGE is advertised"
	caseUsageEmpty        = "DriverGetBucketUsage/a new bucket holds nothing"
	caseUsageCounts       = "DriverGetBucketUsage/counts the objects written"
	caseUsageMissing      = "DriverGetBucketUsage/returns NotFound for a missing bucket"
)

// cases are the requirements of KEP-1979 "COSI Driver" and the COSI spec's "Error Scheme", one
// case each. Names are "<RPC or area>/<requirement>".
var cases = []Case{
	// DriverGetInfo
	{"DriverGetInfo/returns a name in domain name notation, 63 characters at most", func(t *T) {
		if err := driver.ValidateDriverName(t.s.info.GetName()); err != nil {
			t.Errorf("%v", err)
		}
	}},
	{"DriverGetInfo/advertises at least one protocol, each once", func(t *T) {
		info := &cosiproto.DriverGetInfoResponse{Name: "valid.example.com", SupportedProtocols: t.protocols()}
		if err := driver.ValidateGetInfoResponse(info); err != nil {
			t.Errorf("%v", err)
		}
	}},

	// DriverGenerateBucketId
	{"DriverGenerateBucketId/is idempotent for the same name and parameters", func(t *T) {
		req := &cosiproto.DriverGenerateBucketIdRequest{Name: t.name("b"), Parameters: t.s.cfg.BucketParameters}
		first, err := t.s.prov.DriverGenerateBucketId(t.ctx, req)
		t.ok(err, "first DriverGenerateBucketId")
		second, err := t.s.prov.DriverGenerateBucketId(t.ctx, req)
		t.ok(err, "second DriverGenerateBucketId")
		if first.GetBucketId() == "" || first.GetBucketId() != second.GetBucketId() {
			t.Errorf("bucket_id %q, then %q: want the same non-empty ID", first.GetBucketId(), second.GetBucketId())
		}
	}},
	{"DriverGenerateBucketId/creates nothing in the backend", func(t *T) {
		gen, err := t.s.prov.DriverGenerateBucketId(
			t.ctx,
			&cosiproto.DriverGenerateBucketIdRequest{Name: t.name("b"), Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverGenerateBucketId")
		if t.bucketExists(false, gen.GetBucketId()) {
			t.Errorf("bucket %q exists after phase 1; it would leak if COSI never persisted the ID", gen.GetBucketId())
			t.deleteBucket(gen.GetBucketId())
		}
	}},
	{"DriverGenerateBucketId/rejects a missing name with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverGenerateBucketId(
			t.ctx,
			&cosiproto.DriverGenerateBucketIdRequest{Parameters: t.s.cfg.BucketParameters},
		)
		t.code(err, "DriverGenerateBucketId without name", codes.InvalidArgument)
	}},
	{"DriverGenerateBucketId/rejects invalid parameters with InvalidArgument", func(t *T) {
		if t.s.cfg.InvalidBucketParameters == nil {
			t.Skipf("no invalid bucket parameters configured")
		}
		_, err := t.s.prov.DriverGenerateBucketId(
			t.ctx,
			&cosiproto.DriverGenerateBucketIdRequest{Name: t.name("b"), Parameters: t.s.cfg.InvalidBucketParameters},
		)
		t.code(err, "DriverGenerateBucketId with invalid parameters", codes.InvalidArgument)
	}},
	{"DriverGenerateBucketId/rejects an unknown parameter key with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverGenerateBucketId(t.ctx, &cosiproto.DriverGenerateBucketIdRequest{
			Name: t.name("b"), Parameters: t.withUnknownKey(t.s.cfg.BucketParameters, t.s.cfg.BucketParameterKeys),
		})
		t.code(err, "DriverGenerateBucketId with parameter key "+UnknownParameterKey, codes.InvalidArgument)
	}},
	{"DriverGenerateBucketId/returns AlreadyExists for an existing bucket with incompatible parameters", func(t *T) {
		if t.s.cfg.IncompatibleBucketParameters == nil {
			t.Skipf("no incompatible bucket parameters configured")
		}
		name := t.name("b")
		gen, err := t.s.prov.DriverGenerateBucketId(
			t.ctx,
			&cosiproto.DriverGenerateBucketIdRequest{Name: name, Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverGenerateBucketId")
		_, err = t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{BucketId: gen.GetBucketId(), Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverCreateBucket")
		t.Cleanup(func() { t.deleteBucket(gen.GetBucketId()) })
		_, err = t.s.prov.DriverGenerateBucketId(
			t.ctx,
			&cosiproto.DriverGenerateBucketIdRequest{Name: name, Parameters: t.s.cfg.IncompatibleBucketParameters},
		)
		t.code(err, "DriverGenerateBucketId for an existing bucket with other parameters", codes.AlreadyExists)
	}},

	// DriverCreateBucket
	{"DriverCreateBucket/returns info for at least one protocol, only advertised ones", func(t *T) {
		_, resp := t.createBucket()
		if err := driver.ValidateBucketInfo(resp.GetProtocols(), t.protocols(), nil); err != nil {
			t.Errorf("%v", err)
		}
	}},
	{"DriverCreateBucket/supports each advertised protocol when requested", func(t *T) {
		for _, p := range t.protocols() {
			_, resp := t.createBucket(p)
			if err := driver.ValidateBucketInfo(
				resp.GetProtocols(),
				t.protocols(),
				[]cosiproto.ObjectProtocol_Type{p},
			); err != nil {
				t.Errorf("%v: %v", p, err)
			}
		}
	}},
	{"DriverCreateBucket/creates the bucket in the backend", func(t *T) {
		id, _ := t.createBucket()
		if !t.bucketExists(true, id) {
			t.Errorf("bucket %q does not exist in the backend after DriverCreateBucket returned OK", id)
		}
	}},
	{"DriverCreateBucket/is idempotent for the same bucket_id", func(t *T) {
		id, first := t.createBucket()
		second, err := t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{BucketId: id, Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "second DriverCreateBucket for the same bucket_id")
		if !proto.Equal(first.GetProtocols(), second.GetProtocols()) {
			t.Errorf("the second call returned other bucket info: %v, then %v", first.GetProtocols(), second.GetProtocols())
		}
	}},
	{"DriverCreateBucket/rejects a missing bucket_id with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{Parameters: t.s.cfg.BucketParameters},
		)
		t.code(err, "DriverCreateBucket without bucket_id", codes.InvalidArgument)
	}},
	{"DriverCreateBucket/rejects invalid parameters with InvalidArgument", func(t *T) {
		if t.s.cfg.InvalidBucketParameters == nil {
			t.Skipf("no invalid bucket parameters configured")
		}
		id := t.name("b")
		_, err := t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{BucketId: id, Parameters: t.s.cfg.InvalidBucketParameters},
		)
		if err == nil {
			t.deleteBucket(id)
		}
		t.code(err, "DriverCreateBucket with invalid parameters", codes.InvalidArgument)
	}},
	{"DriverCreateBucket/rejects an unknown parameter key with InvalidArgument", func(t *T) {
		id := t.name("b")
		_, err := t.s.prov.DriverCreateBucket(t.ctx, &cosiproto.DriverCreateBucketRequest{
			BucketId: id, Parameters: t.withUnknownKey(t.s.cfg.BucketParameters, t.s.cfg.BucketParameterKeys),
		})
		if err == nil {
			t.deleteBucket(id)
		}
		t.code(err, "DriverCreateBucket with parameter key "+UnknownParameterKey, codes.InvalidArgument)
	}},
	{"DriverCreateBucket/returns AlreadyExists for an existing bucket with incompatible parameters", func(t *T) {
		if t.s.cfg.IncompatibleBucketParameters == nil {
			t.Skipf("no incompatible bucket parameters configured")
		}
		id, _ := t.createBucket()
		_, err := t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{BucketId: id, Parameters: t.s.cfg.IncompatibleBucketParameters},
		)
		t.code(err, "DriverCreateBucket for an existing bucket with other parameters", codes.AlreadyExists)
	}},
	{"DriverCreateBucket/rejects a protocol the driver does not advertise with InvalidArgument", func(t *T) {
		p := t.unsupportedProtocol()
		id := t.name("b")
		_, err := t.s.prov.DriverCreateBucket(
			t.ctx,
			&cosiproto.DriverCreateBucketRequest{
				BucketId:   id,
				Protocols:  []cosiproto.ObjectProtocol_Type{p},
				Parameters: t.s.cfg.BucketParameters,
			},
		)
		if err == nil {
			t.deleteBucket(id)
		}
		t.code(err, "DriverCreateBucket for "+p.String(), codes.InvalidArgument)
	}},

	// DriverGetBucket
	{"DriverGetBucket/returns info for an existing bucket", func(t *T) {
		id := t.s.cfg.StaticBucketID
		if id == "" {
			id, _ = t.createBucket()
		}
		resp, err := t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{BucketId: id})
		t.ok(err, "DriverGetBucket")
		if err := driver.ValidateBucketInfo(resp.GetProtocols(), t.protocols(), nil); err != nil {
			t.Errorf("%v", err)
		}
	}},
	{"DriverGetBucket/returns NotFound for a missing bucket", func(t *T) {
		_, err := t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{BucketId: t.name("missing")})
		t.code(err, "DriverGetBucket for a bucket that does not exist", codes.NotFound)
	}},
	{"DriverGetBucket/returns AlreadyExists for a bucket incompatible with the parameters", func(t *T) {
		if t.s.cfg.IncompatibleBucketParameters == nil {
			t.Skipf("no incompatible bucket parameters configured")
		}
		id, _ := t.createBucket()
		_, err := t.s.prov.DriverGetBucket(
			t.ctx,
			&cosiproto.DriverGetBucketRequest{BucketId: id, Parameters: t.s.cfg.IncompatibleBucketParameters},
		)
		t.code(err, "DriverGetBucket for a bucket created with other parameters", codes.AlreadyExists)
	}},
	{"DriverGetBucket/answers for the requested protocols, and only the bucket's", func(t *T) {
		// A bucket supports the protocols DriverCreateBucket named (all it supports, KEP-1979), and
		// they do not change: asked for one of them, DriverGetBucket names it and no protocol the
		// bucket lacks; asked for a protocol the bucket lacks, it refuses rather than answer OK.
		p := t.protocols()[0]
		id, created := t.createBucket(p)
		supported := driver.BucketInfoProtocols(created.GetProtocols())
		resp, err := t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{
			BucketId: id, Protocols: []cosiproto.ObjectProtocol_Type{p}, Parameters: t.s.cfg.BucketParameters,
		})
		t.ok(err, "DriverGetBucket for "+p.String())
		if err := driver.ValidateBucketInfo(
			resp.GetProtocols(), t.protocols(), []cosiproto.ObjectProtocol_Type{p},
		); err != nil {
			t.Errorf("DriverGetBucket for %v: %v", p, err)
		}
		for _, q := range driver.BucketInfoProtocols(resp.GetProtocols()) {
			if !slices.Contains(supported, q) {
				t.Errorf("DriverGetBucket for %v answered %v info for bucket %q, which DriverCreateBucket created "+
					"for %v: a protocol the bucket does not support", p, q, id, supported)
			}
		}
		for _, q := range t.protocols() {
			if slices.Contains(supported, q) {
				continue
			}
			_, err := t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{
				BucketId: id, Protocols: []cosiproto.ObjectProtocol_Type{q}, Parameters: t.s.cfg.BucketParameters,
			})
			if err == nil {
				t.Errorf("DriverGetBucket for %v answered OK for bucket %q, which DriverCreateBucket created for %v: "+
					"a bucket that lacks a requested protocol is incompatible with the request (AlreadyExists)",
					q, id, supported)
				continue
			}
			t.code(err, fmt.Sprintf("DriverGetBucket for %v of bucket %q, created for %v", q, id, supported),
				codes.AlreadyExists, codes.InvalidArgument)
		}
	}},
	{"DriverGetBucket/rejects a missing bucket_id with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{})
		t.code(err, "DriverGetBucket without bucket_id", codes.InvalidArgument)
	}},

	// DriverDeleteBucket
	{"DriverDeleteBucket/deletes the bucket so that DriverGetBucket no longer finds it", func(t *T) {
		id, _ := t.createBucket()
		_, err := t.s.prov.DriverDeleteBucket(
			t.ctx,
			&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverDeleteBucket")
		_, err = t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{BucketId: id})
		t.code(err, "DriverGetBucket after DriverDeleteBucket", codes.NotFound)
	}},
	{"DriverDeleteBucket/deletes the bucket in the backend", func(t *T) {
		id, _ := t.createBucket()
		_, err := t.s.prov.DriverDeleteBucket(
			t.ctx,
			&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverDeleteBucket")
		if t.bucketExists(false, id) {
			t.Errorf("bucket %q still exists in the backend after DriverDeleteBucket returned OK", id)
		}
	}},
	{"DriverDeleteBucket/deletes a bucket holding objects with them, or refuses with FailedPrecondition",
		func(t *T) {
			// Empty: a driver may refuse, and the suite must then remove the object itself.
			t.needProbe("BucketExists", "Put", "Empty")
			p := t.protocols()[0]
			id, _ := t.createBucket(p)
			g, account, resp, err := t.widestGrant(p, id)
			t.ok(err, "grant")
			// Below a prefix: a bucket that holds only nested objects is not empty.
			const key = "cosi-sanity/nested/object"
			if !t.put(AccessCheck{Protocol: p, Credentials: resp.GetCredentials(), BucketID: id,
				BucketInfo: bucketInfoFor(resp, id)}, key) {
				t.Fatalf("a grant with object data read-write could not write an object into bucket %q", id)
			}
			t.revokeNow(g, account)
			_, err = t.s.prov.DriverDeleteBucket(
				t.ctx,
				&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: t.s.cfg.BucketParameters},
			)
			switch status.Code(err) {
			case codes.OK:
				if t.bucketExists(false, id) {
					t.Fatalf("DriverDeleteBucket of bucket %q, which holds an object, returned OK, but the bucket is "+
						"still in the backend: delete it with its objects, or refuse with FailedPrecondition", id)
				}
				if t.s.cfg.NonEmptyBuckets == RefuseNonEmpty {
					t.Fatalf("DriverDeleteBucket deleted bucket %q with its object, but the configuration says the "+
						"driver refuses to delete a bucket holding objects (NonEmptyBuckets %q): data it was "+
						"configured to keep is gone", id, RefuseNonEmpty)
				}
			case codes.FailedPrecondition:
				if t.s.cfg.NonEmptyBuckets == PurgeNonEmpty {
					t.Errorf("DriverDeleteBucket of bucket %q returned FailedPrecondition, but the configuration says "+
						"the driver deletes a bucket with its objects (NonEmptyBuckets %q)", id, PurgeNonEmpty)
				}
				if !t.bucketExists(true, id) {
					t.Fatalf("DriverDeleteBucket of bucket %q returned FailedPrecondition, but the bucket is gone: "+
						"a refusal must delete nothing", id)
				}
				if objects, ok := t.objects(id); ok && !slices.Contains(objects, key) {
					t.Fatalf("DriverDeleteBucket of bucket %q returned FailedPrecondition, but its object %q is gone: "+
						"a refusal must delete nothing", id, key)
				}
			default:
				t.Fatalf("DriverDeleteBucket of bucket %q, which holds an object, returned %v (%s); want OK (the "+
					"bucket and its objects deleted) or FailedPrecondition (nothing deleted)",
					id, status.Code(err), status.Convert(err).Message())
			}
		}},
	{"DriverDeleteBucket/returns OK when deleting twice", func(t *T) {
		id, _ := t.createBucket()
		for i := range 2 {
			_, err := t.s.prov.DriverDeleteBucket(
				t.ctx,
				&cosiproto.DriverDeleteBucketRequest{BucketId: id, Parameters: t.s.cfg.BucketParameters},
			)
			t.ok(err, []string{"first", "second"}[i]+" DriverDeleteBucket")
		}
	}},
	{"DriverDeleteBucket/returns OK for an unknown bucket_id", func(t *T) {
		_, err := t.s.prov.DriverDeleteBucket(
			t.ctx,
			&cosiproto.DriverDeleteBucketRequest{BucketId: t.name("missing"), Parameters: t.s.cfg.BucketParameters},
		)
		t.ok(err, "DriverDeleteBucket for a bucket that never existed")
	}},
	{"DriverDeleteBucket/rejects a missing bucket_id with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverDeleteBucket(t.ctx, &cosiproto.DriverDeleteBucketRequest{})
		t.code(err, "DriverDeleteBucket without bucket_id", codes.InvalidArgument)
	}},

	// DriverGenerateBucketAccessId
	{"DriverGenerateBucketAccessId/is idempotent for the same account_name and parameters", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		req := t.keyGrant(p, readWrite, id).generateRequest(t.name("a"))
		first, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, req)
		t.ok(err, "first DriverGenerateBucketAccessId")
		second, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, req)
		t.ok(err, "second DriverGenerateBucketAccessId")
		if first.GetAccountId() == "" || first.GetAccountId() != second.GetAccountId() {
			t.Errorf("account_id %q, then %q: want the same non-empty ID", first.GetAccountId(), second.GetAccountId())
		}
	}},
	{"DriverGenerateBucketAccessId/returns different account_ids for different account_names", func(t *T) {
		// Two BucketAccesses with the same request (two workloads on one claim) have different
		// account_names: an account_id derived from anything else makes them share one account.
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		var ids []string
		names := []string{t.name("a"), t.name("a")}
		for _, name := range names {
			gen, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, g.generateRequest(name))
			t.ok(err, "DriverGenerateBucketAccessId")
			ids = append(ids, gen.GetAccountId())
		}
		if ids[0] == ids[1] {
			t.Errorf("account_names %q and %q got the same account_id %q for the same buckets and modes: two "+
				"BucketAccesses would share one backend account, and revoking one would revoke the other (the "+
				"account_id must be unique, derive it from account_name)", names[0], names[1], ids[0])
		}
	}},
	{"DriverGenerateBucketAccessId/creates no account in the backend", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		before := t.accounts()
		_, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, t.keyGrant(p, readWrite, id).generateRequest(t.name("a")))
		t.ok(err, "DriverGenerateBucketAccessId")
		if after := t.accounts(); len(after) != len(before) {
			t.Errorf(
				"the backend has %d accounts after phase 1, %d before; they would leak if COSI never persisted the ID",
				len(after),
				len(before),
			)
		}
	}},
	{"DriverGenerateBucketAccessId/refuses an existing account_name with other access modes in phase 1 or 2", func(t *T) {
		// Phase 1 may leave the check to phase 2 (it need not look at the backend), but one of the
		// two must answer AlreadyExists: never an account_id that reaches the old account.
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		name := t.name("a")
		_, _, err := t.grantAs(t.keyGrant(p, readWrite, id), name)
		t.ok(err, "grant")
		other := t.keyGrant(p, readOnly, id)
		gen, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, other.generateRequest(name))
		if err != nil {
			t.code(err, "DriverGenerateBucketAccessId for a granted account_name with READ_ONLY instead of READ_WRITE",
				codes.AlreadyExists)
			return
		}
		_, err = t.s.prov.DriverGrantBucketAccess(t.ctx, other.grantRequest(gen.GetAccountId()))
		if err == nil {
			t.Cleanup(func() { _, _ = t.s.prov.DriverRevokeBucketAccess(t.ctx, other.revokeRequest(gen.GetAccountId())) })
		}
		t.code(err, "DriverGenerateBucketAccessId returned OK for a granted account_name with READ_ONLY instead "+
			"of READ_WRITE, then DriverGrantBucketAccess", codes.AlreadyExists)
	}},
	{"DriverGenerateBucketAccessId/rejects an unknown parameter key with InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		g.params = t.withUnknownKey(t.s.cfg.AccessParameters, t.s.cfg.AccessParameterKeys)
		_, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, g.generateRequest(t.name("a")))
		t.code(err, "DriverGenerateBucketAccessId with parameter key "+UnknownParameterKey, codes.InvalidArgument)
	}},
	{"DriverGenerateBucketAccessId/rejects a missing account_name with InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		_, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, t.keyGrant(p, readWrite, id).generateRequest(""))
		t.code(err, "DriverGenerateBucketAccessId without account_name", codes.InvalidArgument)
	}},
	{"DriverGenerateBucketAccessId/rejects a request without buckets with InvalidArgument", func(t *T) {
		_, err := t.s.prov.DriverGenerateBucketAccessId(
			t.ctx,
			t.keyGrant(t.protocols()[0], readWrite).generateRequest(t.name("a")),
		)
		t.code(err, "DriverGenerateBucketAccessId without buckets", codes.InvalidArgument)
	}},

	// DriverGrantBucketAccess
	{"DriverGrantBucketAccess/returns complete credentials and bucket info for each advertised protocol", func(t *T) {
		for _, p := range t.protocols() {
			id, _ := t.createBucket(p)
			g := t.keyGrant(p, readWrite, id)
			_, resp, err := t.grant(g)
			t.ok(err, "granting "+p.String()+" access")
			if err := driver.ValidateGrantResponse(g.grantRequest("x"), resp); err != nil {
				t.Errorf("%v: %v", p, err)
			}
		}
	}},
	{"DriverGrantBucketAccess/is idempotent for the same account_id", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		account, first, err := t.grant(g)
		t.ok(err, "first grant")
		second, err := t.s.prov.DriverGrantBucketAccess(t.ctx, g.grantRequest(account))
		t.ok(err, "second DriverGrantBucketAccess for the same account_id")
		if proto.Equal(first.GetCredentials(), second.GetCredentials()) {
			return
		}
		// Different credentials are acceptable if both work: a driver may issue a new key.
		for i, creds := range []*cosiproto.CredentialInfo{first.GetCredentials(), second.GetCredentials()} {
			if !t.allowed(true, p, creds, id, bucketInfoFor(second, id), ObjectData, false) {
				t.Errorf("the credentials of grant %d do not work; repeating a grant must not break earlier credentials", i+1)
			}
		}
	}},
	{"DriverGrantBucketAccess/creates one backend account however often it is called", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		before := t.accounts()
		g := t.keyGrant(p, readWrite, id)
		account, _, err := t.grant(g)
		t.ok(err, "grant")
		_, err = t.s.prov.DriverGrantBucketAccess(t.ctx, g.grantRequest(account))
		t.ok(err, "second DriverGrantBucketAccess")
		oneMore := func(after []string) bool { return len(after) == len(before)+1 }
		if after := t.accountsSettled(oneMore); len(after) != len(before)+1 {
			t.Errorf(
				"the backend has %d accounts after granting twice, %d before: want exactly one more",
				len(after),
				len(before),
			)
		}
	}},
	{"DriverGrantBucketAccess/gives each access its own credentials", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		_, first, err := t.grant(g)
		t.ok(err, "first access")
		_, second, err := t.grant(g)
		t.ok(err, "second access, same request, other account_name")
		if proto.Equal(first.GetCredentials(), second.GetCredentials()) {
			t.Fatalf("two accesses with the same request got the same credentials: revoking one would revoke the " +
				"other, and the backend cannot tell their workloads apart (is the backend user named after the " +
				"request instead of the account_id?)")
		}
		a, ok := t.accountOf(first.GetCredentials(), anyAccount)
		b, _ := t.accountOf(second.GetCredentials(), anyAccount)
		if ok && a != "" && a == b {
			t.Errorf("the credentials of two accesses authenticate as the same backend account %q: revoking one "+
				"would revoke the other", a)
		}
	}},
	{"DriverGrantBucketAccess/leaves other accesses to the same bucket working", func(t *T) {
		// Two workloads on one claim: granting or revoking the second must not touch the first
		// (a bucket policy rewritten whole by each grant, or deleted by each revoke, does).
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		_, first, err := t.grant(g)
		t.ok(err, "first access")
		creds, info := first.GetCredentials(), bucketInfoFor(first, id)
		if !t.allowed(true, p, creds, id, info, ObjectData, false) {
			t.Fatalf("the first access's credentials do not work")
		}
		account, _, err := t.grant(g)
		t.ok(err, "second access to the same bucket")
		for _, write := range []bool{false, true} {
			if !t.allowed(true, p, creds, id, info, ObjectData, write) {
				t.Errorf("the first access can no longer %s object data after a second access to the same bucket was "+
					"granted: a grant must add its own permissions, not replace the bucket's (PutBucketPolicy "+
					"with one statement?)", rw(write))
			}
		}
		_, err = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
		t.ok(err, "revoking the second access")
		for _, write := range []bool{false, true} {
			if !t.allowed(true, p, creds, id, info, ObjectData, write) {
				t.Errorf("the first access can no longer %s object data after the second access to the same bucket "+
					"was revoked: a revoke must remove its own account's access only", rw(write))
			}
		}
	}},
	{"DriverGrantBucketAccess/gives no access to buckets outside the grant", func(t *T) {
		p := t.protocols()[0]
		granted, _ := t.createBucket(p)
		other, otherResp := t.createBucket(p)
		_, _, resp, err := t.widestGrant(p, granted)
		t.ok(err, "grant")
		creds := resp.GetCredentials()
		if !t.allowed(true, p, creds, granted, bucketInfoFor(resp, granted), ObjectData, false) {
			t.Fatalf("the credentials do not work on the granted bucket %q", granted)
		}
		for _, c := range []Category{ObjectData, ObjectMetadata, BucketMetadata} {
			for _, write := range []bool{false, true} {
				if t.allowed(false, p, creds, other, otherResp.GetProtocols(), c, write) {
					t.Errorf("the credentials granted for bucket %q can %s %v of bucket %q, which the grant did not "+
						"list: the policy reaches beyond the granted buckets", granted, rw(write), c, other)
				}
			}
		}
	}},
	{"DriverGrantBucketAccess/returns each bucket's own bucket info", func(t *T) {
		// Compared with what DriverCreateBucket said about the same bucket: a grant that names
		// another bucket, endpoint or region sends the workload's data elsewhere.
		p := t.protocols()[0]
		a, aResp := t.createBucket(p)
		b, bResp := t.createBucket(p)
		created := map[string]*cosiproto.ProtocolBucketInfo{a: aResp.GetProtocols(), b: bResp.GetProtocols()}
		g := t.keyGrant(p, readWrite, a, b)
		_, resp, err := t.grant(g)
		if status.Code(err) == codes.OutOfRange {
			g = t.keyGrant(p, readWrite, a)
			_, resp, err = t.grant(g)
		}
		t.ok(err, "grant")
		for _, ab := range g.buckets {
			id := ab.GetBucketId()
			for _, d := range bucketInfoDiffs(created[id], bucketInfoFor(resp, id)) {
				t.Errorf("bucket %q: the grant returned %s: the workload would reach another bucket or endpoint", id, d)
			}
		}
	}},
	{"DriverGrantBucketAccess/returns AlreadyExists for a repeat grant with other access modes", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		account, _, err := t.grant(t.keyGrant(p, readWrite, id))
		t.ok(err, "grant")
		_, err = t.s.prov.DriverGrantBucketAccess(t.ctx, t.keyGrant(p, readOnly, id).grantRequest(account))
		t.code(err, "DriverGrantBucketAccess for a granted account_id with READ_ONLY instead of READ_WRITE",
			codes.AlreadyExists)
	}},
	{"DriverGrantBucketAccess/returns AlreadyExists for a repeat grant with other access parameters", func(t *T) {
		if t.s.cfg.IncompatibleAccessParameters == nil {
			t.Skipf("no incompatible access parameters configured")
		}
		if maps.Equal(t.s.cfg.IncompatibleAccessParameters, t.s.cfg.AccessParameters) {
			t.Fatalf("configuration: the incompatible access parameters are the access parameters")
		}
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		account, _, err := t.grant(g)
		t.ok(err, "grant")
		other := g
		other.params = t.s.cfg.IncompatibleAccessParameters
		_, err = t.s.prov.DriverGrantBucketAccess(t.ctx, other.grantRequest(account))
		t.code(err, fmt.Sprintf("DriverGrantBucketAccess for a granted account_id with access parameters %v "+
			"instead of %v", other.params, g.params), codes.AlreadyExists)
	}},
	{"DriverGrantBucketAccess/accepts each access mode or returns InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		for _, m := range accessModeCombinations() {
			g := t.keyGrant(p, m.modes, id)
			account, _, err := t.grant(g)
			if err != nil {
				t.code(err, "granting "+m.name, codes.InvalidArgument)
				continue
			}
			t.revokeNow(g, account)
		}
	}},
	{"DriverGrantBucketAccess/enforces each granted access mode", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		for _, m := range accessModeCombinations() {
			g := t.keyGrant(p, m.modes, id)
			account, resp, err := t.grant(g)
			if status.Code(err) == codes.InvalidArgument {
				continue // refused: the case above checks that it is refused this way
			}
			t.ok(err, "granting "+m.name)
			info := bucketInfoFor(resp, id)
			for _, write := range []bool{false, true} {
				want := m.allows(write)
				if got := t.allowed(want, p, resp.GetCredentials(), id, info, m.category, write); got != want {
					t.Errorf(
						"%s: %v %s allowed=%v, want %v",
						m.name,
						m.category,
						map[bool]string{true: "write", false: "read"}[write],
						got,
						want,
					)
				}
			}
			t.revokeNow(g, account)
		}
	}},
	{"DriverGrantBucketAccess/gives multiple buckets one credential, or returns OutOfRange", func(t *T) {
		p := t.protocols()[0]
		a, _ := t.createBucket(p)
		b, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, a, b)
		_, resp, err := t.grant(g)
		if err != nil {
			t.code(err, "multi-bucket grant", codes.OutOfRange)
			return
		}
		if err := driver.ValidateGrantResponse(g.grantRequest("x"), resp); err != nil {
			t.Fatalf("%v", err)
		}
		for _, id := range []string{a, b} {
			if !t.allowed(true, p, resp.GetCredentials(), id, bucketInfoFor(resp, id), ObjectData, true) {
				t.Errorf("the shared credential does not open bucket %q", id)
			}
		}
	}},
	{"DriverGrantBucketAccess/gives each bucket of a multi-bucket grant its own access modes", func(t *T) {
		p := t.protocols()[0]
		a, _ := t.createBucket(p)
		b, _ := t.createBucket(p)
		// Both orders, so that a driver that applies the first or the most permissive bucket's
		// modes to every bucket fails either way.
		for _, order := range [][2]string{{a, b}, {b, a}} {
			rwID, roID := order[0], order[1]
			g := grant{protocol: p, auth: cosiproto.AuthenticationType_KEY, params: t.s.cfg.AccessParameters}
			g.buckets = []*cosiproto.AccessedBucket{
				{BucketId: rwID, AccessModes: readWrite},
				{BucketId: roID, AccessModes: readOnly},
			}
			if rwID == b {
				g.buckets[0], g.buckets[1] = g.buckets[1], g.buckets[0]
			}
			_, resp, err := t.grant(g)
			if status.Code(err) == codes.OutOfRange {
				t.Skipf("the driver cannot give several buckets one credential (OutOfRange)")
			}
			t.ok(err, "multi-bucket grant")
			creds := resp.GetCredentials()
			for _, c := range []struct {
				id    string
				mode  string
				write bool
				want  bool
			}{
				{rwID, "READ_WRITE", true, true},
				{roID, "READ_ONLY", false, true},
				{roID, "READ_ONLY", true, false},
			} {
				if got := t.allowed(c.want, p, creds, c.id, bucketInfoFor(resp, c.id), ObjectData, c.write); got != c.want {
					t.Errorf("bucket %q granted object data %s next to a READ_WRITE bucket: %s allowed=%v, want %v",
						c.id, c.mode, rw(c.write), got, c.want)
				}
			}
		}
	}},
	{"DriverGrantBucketAccess/returns NotFound for a bucket that does not exist", func(t *T) {
		p := t.protocols()[0]
		missing := t.name("missing")
		_, _, err := t.grant(t.keyGrant(p, readWrite, missing))
		t.code(err, "granting access to bucket "+missing+", which does not exist", codes.NotFound)
	}},
	{"DriverGrantBucketAccess/grants ServiceAccount authentication or returns InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		g.auth = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		g.sa = &cosiproto.ServiceAccount{Namespace: "sanity", Name: "workload"}
		_, _, err := t.grant(g)
		if err != nil {
			t.code(err, "ServiceAccount grant", codes.InvalidArgument)
		}
	}},
	{"DriverGrantBucketAccess/serves ServiceAccount grants through the ServiceAccount, not a key", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		g.auth = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		g.sa = &cosiproto.ServiceAccount{Namespace: "sanity", Name: t.name("sa")}
		_, resp, err := t.grant(g)
		if status.Code(err) == codes.InvalidArgument {
			t.Skipf("the driver does not support ServiceAccount authentication (InvalidArgument)")
		}
		t.ok(err, "ServiceAccount grant")
		if hasKey(resp.GetCredentials()) {
			t.Errorf("the SERVICE_ACCOUNT grant returned credentials with a key: a key served instead of the " +
				"ServiceAccount's identity (workloads authenticate as their ServiceAccount, COSI writes no key to their " +
				"Secret)")
		}
		if !t.allowedAs(true, p, g.sa, resp, id, ObjectData, true) {
			t.Errorf("a workload running as ServiceAccount %s/%s cannot write object data in bucket %q: the grant "+
				"mapped no backend identity to it", g.sa.GetNamespace(), g.sa.GetName(), id)
		}
	}},
	{"DriverGrantBucketAccess/maps only the granted ServiceAccount", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		g.auth = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		g.sa = &cosiproto.ServiceAccount{Namespace: t.name("ns"), Name: t.name("sa")}
		_, resp, err := t.grant(g)
		if status.Code(err) == codes.InvalidArgument {
			t.Skipf("the driver does not support ServiceAccount authentication (InvalidArgument)")
		}
		t.ok(err, "ServiceAccount grant")
		if !t.allowedAs(true, p, g.sa, resp, id, ObjectData, true) {
			t.Fatalf("the granted ServiceAccount %s/%s cannot write object data in bucket %q",
				g.sa.GetNamespace(), g.sa.GetName(), id)
		}
		for _, other := range []struct {
			what string
			sa   *cosiproto.ServiceAccount
		}{
			{"another ServiceAccount of the namespace", &cosiproto.ServiceAccount{Namespace: g.sa.GetNamespace(),
				Name: t.name("sa")}},
			{"the same name in another namespace", &cosiproto.ServiceAccount{Namespace: t.name("ns"),
				Name: g.sa.GetName()}},
		} {
			if t.allowedAs(false, p, other.sa, resp, id, ObjectData, true) {
				t.Errorf("%s (%s/%s) can write object data in bucket %q: the grant maps more than ServiceAccount %s/%s",
					other.what, other.sa.GetNamespace(), other.sa.GetName(), id, g.sa.GetNamespace(), g.sa.GetName())
			}
		}
	}},
	{"DriverGrantBucketAccess/rejects a missing account_id with InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		_, err := t.s.prov.DriverGrantBucketAccess(t.ctx, t.keyGrant(p, readWrite, id).grantRequest(""))
		t.code(err, "DriverGrantBucketAccess without account_id", codes.InvalidArgument)
	}},
	{"DriverGrantBucketAccess/rejects a protocol the driver does not advertise with InvalidArgument", func(t *T) {
		unsupported := t.unsupportedProtocol()
		id, _ := t.createBucket(t.protocols()[0])
		_, _, err := t.grant(t.keyGrant(unsupported, readWrite, id))
		t.code(err, "granting "+unsupported.String()+" access", codes.InvalidArgument)
	}},
	{"DriverGrantBucketAccess/rejects invalid parameters with InvalidArgument", func(t *T) {
		if t.s.cfg.InvalidAccessParameters == nil {
			t.Skipf("no invalid access parameters configured")
		}
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		g.params = t.s.cfg.InvalidAccessParameters
		_, _, err := t.grant(g)
		t.code(err, "grant with invalid parameters", codes.InvalidArgument)
	}},

	{"DriverGrantBucketAccess/rejects an unknown parameter key with InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		account, err := t.s.prov.DriverGenerateBucketAccessId(t.ctx, g.generateRequest(t.name("a")))
		t.ok(err, "DriverGenerateBucketAccessId with valid parameters")
		g.params = t.withUnknownKey(t.s.cfg.AccessParameters, t.s.cfg.AccessParameterKeys)
		_, err = t.s.prov.DriverGrantBucketAccess(t.ctx, g.grantRequest(account.GetAccountId()))
		if err == nil {
			t.Cleanup(func() { _, _ = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account.GetAccountId())) })
		}
		t.code(err, "DriverGrantBucketAccess with parameter key "+UnknownParameterKey, codes.InvalidArgument)
	}},

	// DriverRevokeBucketAccess
	{"DriverRevokeBucketAccess/revokes the credentials", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		account, resp, err := t.grant(g)
		t.ok(err, "grant")
		info := bucketInfoFor(resp, id)
		if !t.allowed(true, p, resp.GetCredentials(), id, info, ObjectData, false) {
			t.Fatalf("the credentials do not work before revocation")
		}
		_, err = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
		t.ok(err, "DriverRevokeBucketAccess")
		if t.allowed(false, p, resp.GetCredentials(), id, info, ObjectData, false) {
			t.Errorf("the credentials still work after DriverRevokeBucketAccess returned OK")
		}
	}},
	{"DriverRevokeBucketAccess/leaves no account and no access of any category", func(t *T) {
		t.needProbe("Allowed", "Accounts")
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		before := t.accounts()
		g, account, resp, err := t.widestGrant(p, id)
		t.ok(err, "grant")
		creds, info := resp.GetCredentials(), bucketInfoFor(resp, id)
		if !t.allowed(true, p, creds, id, info, ObjectData, false) {
			t.Fatalf("the credentials do not work before revocation")
		}
		_, err = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
		t.ok(err, "DriverRevokeBucketAccess")
		for _, c := range []Category{ObjectData, ObjectMetadata, BucketMetadata} {
			for _, write := range []bool{false, true} {
				if t.allowed(false, p, creds, id, info, c, write) {
					t.Errorf("%v %s is still allowed after DriverRevokeBucketAccess returned OK", c, rw(write))
				}
			}
		}
		if who, ok := t.accountOf(creds, ""); ok && who != "" {
			t.Errorf("the credentials still authenticate as backend account %q after DriverRevokeBucketAccess", who)
		}
		gone := func(list []string) bool {
			return !slices.ContainsFunc(list, func(a string) bool { return !slices.Contains(before, a) })
		}
		for _, a := range t.accountsSettled(gone) {
			if !slices.Contains(before, a) {
				t.Errorf("backend account %q still exists after DriverRevokeBucketAccess returned OK", a)
			}
		}
	}},
	{"DriverRevokeBucketAccess/revokes every bucket of a multi-bucket access", func(t *T) {
		p := t.protocols()[0]
		a, _ := t.createBucket(p)
		b, _ := t.createBucket(p)
		g, account, resp, err := t.widestGrant(p, a, b)
		if status.Code(err) == codes.OutOfRange {
			t.Skipf("the driver cannot give several buckets one credential (OutOfRange)")
		}
		t.ok(err, "multi-bucket grant")
		creds := resp.GetCredentials()
		for _, id := range []string{a, b} {
			if !t.allowed(true, p, creds, id, bucketInfoFor(resp, id), ObjectData, false) {
				t.Fatalf("the credentials do not work on bucket %q before revocation", id)
			}
		}
		_, err = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
		t.ok(err, "DriverRevokeBucketAccess")
		for _, id := range []string{a, b} {
			for _, c := range []Category{ObjectData, ObjectMetadata, BucketMetadata} {
				for _, write := range []bool{false, true} {
					if t.allowed(false, p, creds, id, bucketInfoFor(resp, id), c, write) {
						t.Errorf("%v %s of bucket %q is still allowed after DriverRevokeBucketAccess of the multi-bucket "+
							"access returned OK", c, rw(write), id)
					}
				}
			}
		}
		if who, ok := t.accountOf(creds, ""); ok && who != "" {
			t.Errorf("the credentials still authenticate as backend account %q after DriverRevokeBucketAccess of the "+
				"multi-bucket access", who)
		}
	}},
	{"DriverRevokeBucketAccess/ends a ServiceAccount's access", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, allModes, id)
		g.auth = cosiproto.AuthenticationType_SERVICE_ACCOUNT
		g.sa = &cosiproto.ServiceAccount{Namespace: t.name("ns"), Name: t.name("sa")}
		account, resp, err := t.grant(g)
		if status.Code(err) == codes.InvalidArgument {
			t.Skipf("the driver does not support ServiceAccount authentication (InvalidArgument)")
		}
		t.ok(err, "ServiceAccount grant")
		if !t.allowedAs(true, p, g.sa, resp, id, ObjectData, false) {
			t.Fatalf("the ServiceAccount cannot read object data before revocation")
		}
		for i := range 2 {
			_, err = t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
			t.ok(err, []string{"DriverRevokeBucketAccess", "a second DriverRevokeBucketAccess"}[i])
		}
		for _, c := range []Category{ObjectData, ObjectMetadata, BucketMetadata} {
			for _, write := range []bool{false, true} {
				if t.allowedAs(false, p, g.sa, resp, id, c, write) {
					t.Errorf("%v %s by ServiceAccount %s/%s is still allowed after DriverRevokeBucketAccess returned OK",
						c, rw(write), g.sa.GetNamespace(), g.sa.GetName())
				}
			}
		}
	}},
	{"DriverRevokeBucketAccess/returns OK when revoking twice", func(t *T) {
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		g := t.keyGrant(p, readWrite, id)
		account, _, err := t.grant(g)
		t.ok(err, "grant")
		for i := range 2 {
			_, err := t.s.prov.DriverRevokeBucketAccess(t.ctx, g.revokeRequest(account))
			t.ok(err, []string{"first", "second"}[i]+" DriverRevokeBucketAccess")
		}
	}},
	{"DriverRevokeBucketAccess/returns OK for an unknown account_id", func(t *T) {
		p := t.protocols()[0]
		_, err := t.s.prov.DriverRevokeBucketAccess(
			t.ctx,
			t.keyGrant(p, readWrite, t.name("missing")).revokeRequest(t.name("missing")),
		)
		t.ok(err, "DriverRevokeBucketAccess for an account that never existed")
	}},
	{"DriverRevokeBucketAccess/rejects a missing account_id with InvalidArgument", func(t *T) {
		p := t.protocols()[0]
		_, err := t.s.prov.DriverRevokeBucketAccess(t.ctx, t.keyGrant(p, readWrite, t.name("b")).revokeRequest(""))
		t.code(err, "DriverRevokeBucketAccess without account_id", codes.InvalidArgument)
	}},

	// DriverGetBucketUsage (COSI's extension): a driver that does not advertise BUCKET_USAGE
	// must answer Unimplemented; one that does, what its buckets hold.
	{caseUsageUnadvertised, func(t *T) {
		if t.usage() {
			t.Skipf("the driver advertises BUCKET_USAGE")
		}
		_, err := t.s.prov.DriverGetBucketUsage(t.ctx, &cosiproto.DriverGetBucketUsageRequest{BucketId: t.name("b")})
		t.code(err, "DriverGetBucketUsage of a driver that does not advertise BUCKET_USAGE", codes.Unimplemented)
	}},
	{caseUsageEmpty, func(t *T) {
		t.needUsage()
		id, _ := t.createBucket(t.protocols()[0])
		u, err := t.s.prov.DriverGetBucketUsage(t.ctx, &cosiproto.DriverGetBucketUsageRequest{
			BucketId: id, Parameters: t.s.cfg.BucketParameters,
		})
		t.ok(err, "DriverGetBucketUsage of a new bucket")
		if err := driver.ValidateUsageResponse(u); err != nil {
			t.Errorf("invalid answer: %v", err)
		}
		if u.GetSizeBytes() != 0 || u.GetObjectCount() != 0 {
			t.Errorf("a new bucket holds %d bytes in %d objects, want nothing", u.GetSizeBytes(), u.GetObjectCount())
		}
	}},
	{caseUsageCounts, func(t *T) {
		t.needUsage()
		t.needProbe("Put")
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		_, _, resp, err := t.widestGrant(p, id)
		t.ok(err, "grant")
		for _, key := range []string{"cosi-sanity/usage/one", "cosi-sanity/usage/two"} {
			if !t.put(AccessCheck{Protocol: p, Credentials: resp.GetCredentials(), BucketID: id,
				BucketInfo: bucketInfoFor(resp, id)}, key) {
				t.Fatalf("the grant could not write %q", key)
			}
		}
		got, err := t.s.settleString(t.ctx, func(ctx context.Context) (string, error) {
			u, err := t.s.prov.DriverGetBucketUsage(ctx, &cosiproto.DriverGetBucketUsageRequest{
				BucketId: id, Parameters: t.s.cfg.BucketParameters,
			})
			if err == nil {
				err = driver.ValidateUsageResponse(u)
			}
			return fmt.Sprintf("%d objects", u.GetObjectCount()), err
		}, "2 objects")
		if err != nil {
			t.Fatalf("DriverGetBucketUsage: %v", err)
		}
		if got != "2 objects" {
			t.Errorf("after 2 objects were written, DriverGetBucketUsage counts %s", got)
		}
	}},
	{caseUsageMissing, func(t *T) {
		t.needUsage()
		_, err := t.s.prov.DriverGetBucketUsage(t.ctx, &cosiproto.DriverGetBucketUsageRequest{
			BucketId: t.name("missing"), Parameters: t.s.cfg.BucketParameters,
		})
		t.code(err, "DriverGetBucketUsage of a bucket that does not exist", codes.NotFound)
	}},

	// DriverRotateBucketAccessCredentials and DriverRetireBucketAccessCredentials (COSI's
	// extension): optional; a driver that answers Unimplemented, or grants without a
	// credential_id, skips these cases.
	{"DriverRotateBucketAccessCredentials/returns a new working credential; the old one keeps working", func(t *T) {
		r := t.rotation()
		if err := driver.ValidateRotateResponse(r.rotateRequest(r.grantResp.GetCredentialId()), r.rotated); err != nil {
			t.Fatalf("invalid answer: %v", err)
		}
		if !r.works(true, r.rotated.GetCredentials()) {
			t.Errorf("the new credential does not work")
		}
		if !r.works(true, r.grantResp.GetCredentials()) {
			t.Errorf("the old credential stopped working before it was retired")
		}
	}},
	{"DriverRotateBucketAccessCredentials/is idempotent for the same credential_id", func(t *T) {
		r := t.rotation()
		again, err := t.s.prov.DriverRotateBucketAccessCredentials(t.ctx, r.rotateRequest(r.grantResp.GetCredentialId()))
		t.ok(err, "second DriverRotateBucketAccessCredentials")
		if !r.works(true, again.GetCredentials()) {
			t.Errorf("the credential of the repeated call does not work")
		}
		// The same credential, or (a driver that cannot return a secret twice) a replacement of it.
		if again.GetCredentialId() != r.rotated.GetCredentialId() && r.works(false, r.rotated.GetCredentials()) {
			t.Errorf("the repeated call issued credential %q and left the first call's %q working: "+
				"one rotation must not leave two new credentials", again.GetCredentialId(), r.rotated.GetCredentialId())
		}
		if !r.works(true, r.grantResp.GetCredentials()) {
			t.Errorf("the old credential stopped working before it was retired")
		}
	}},
	{"DriverRotateBucketAccessCredentials/returns NotFound for an unknown account", func(t *T) {
		r := t.rotation()
		req := r.rotateRequest(r.grantResp.GetCredentialId())
		req.AccountId = t.name("missing")
		_, err := t.s.prov.DriverRotateBucketAccessCredentials(t.ctx, req)
		t.code(err, "DriverRotateBucketAccessCredentials for an account that does not exist", codes.NotFound)
	}},
	{"DriverRotateBucketAccessCredentials/returns NotFound for a credential the account does not have", func(t *T) {
		// Not a new key: it would rotate a credential no Secret holds, and COSI would retire one
		// that is still in use.
		r := t.rotatableGrant()
		unknown := t.name("missing")
		_, err := t.s.prov.DriverRotateBucketAccessCredentials(t.ctx, r.rotateRequest(unknown))
		if status.Code(err) == codes.Unimplemented {
			t.Skipf("the driver does not rotate credentials (DriverRotateBucketAccessCredentials: Unimplemented)")
		}
		t.code(err, fmt.Sprintf("DriverRotateBucketAccessCredentials of account %q with credential_id %q, which it "+
			"does not have", r.account, unknown), codes.NotFound)
	}},
	{"DriverRotateBucketAccessCredentials/rejects a missing credential_id with InvalidArgument", func(t *T) {
		r := t.rotation()
		_, err := t.s.prov.DriverRotateBucketAccessCredentials(t.ctx, r.rotateRequest(""))
		t.code(err, "DriverRotateBucketAccessCredentials without credential_id", codes.InvalidArgument)
	}},
	{"DriverRetireBucketAccessCredentials/refuses the retired credential and keeps the new one", func(t *T) {
		r := t.rotation()
		_, err := t.s.prov.DriverRetireBucketAccessCredentials(t.ctx, r.retireRequest(r.grantResp.GetCredentialId()))
		t.ok(err, "DriverRetireBucketAccessCredentials")
		if r.works(false, r.grantResp.GetCredentials()) {
			t.Errorf("the retired credential still works after DriverRetireBucketAccessCredentials returned OK")
		}
		if !r.works(true, r.rotated.GetCredentials()) {
			t.Errorf("retiring the old credential broke the new one")
		}
	}},
	{"DriverRetireBucketAccessCredentials/refuses the account's only credential with FailedPrecondition", func(t *T) {
		// A driver never leaves an account without a credential: DriverRevokeBucketAccess removes
		// accounts.
		r := t.rotatableGrant()
		_, err := t.s.prov.DriverRetireBucketAccessCredentials(t.ctx, r.retireRequest(r.grantResp.GetCredentialId()))
		if status.Code(err) == codes.Unimplemented {
			t.Skipf("the driver does not rotate credentials (DriverRetireBucketAccessCredentials: Unimplemented)")
		}
		t.code(err, "DriverRetireBucketAccessCredentials of the only credential of a new grant",
			codes.FailedPrecondition)
	}},
	{"DriverRetireBucketAccessCredentials/returns OK when retiring twice, and for an unknown account", func(t *T) {
		r := t.rotation()
		for i := range 2 {
			_, err := t.s.prov.DriverRetireBucketAccessCredentials(t.ctx, r.retireRequest(r.grantResp.GetCredentialId()))
			t.ok(err, []string{"first", "second"}[i]+" DriverRetireBucketAccessCredentials")
		}
		req := r.retireRequest(r.grantResp.GetCredentialId())
		req.AccountId = t.name("missing")
		_, err := t.s.prov.DriverRetireBucketAccessCredentials(t.ctx, req)
		t.ok(err, "DriverRetireBucketAccessCredentials for an account that never existed")
	}},

	// Error scheme (COSI spec): checked on every call of every case by the suite's interceptor;
	// these cases make sure some errors happen even when run alone.
	{"Errors/carry a readable message and no status details", func(t *T) {
		_, _ = t.s.prov.DriverCreateBucket(t.ctx, &cosiproto.DriverCreateBucketRequest{})
		_, _ = t.s.prov.DriverGetBucket(t.ctx, &cosiproto.DriverGetBucketRequest{BucketId: t.name("missing")})
		_, _ = t.s.prov.DriverGrantBucketAccess(t.ctx, &cosiproto.DriverGrantBucketAccessRequest{})
	}},
	{"Errors/an unknown RPC returns Unimplemented", func(t *T) {
		err := t.s.conn.Invoke(
			t.ctx,
			"/cosi.v1alpha2.Provisioner/DriverUnknownMethod",
			&cosiproto.DriverGetInfoRequest{},
			&cosiproto.DriverGetInfoResponse{},
		)
		t.code(err, "calling an RPC the driver does not have", codes.Unimplemented)
	}},

	// Secrets
	{"Secrets/errors carry no credential", func(t *T) {
		// The interceptor checks every error of every case against every credential returned so
		// far; this case provokes the errors most likely to describe an existing account.
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		name := t.name("a")
		account, _, err := t.grantAs(t.keyGrant(p, readWrite, id), name)
		t.ok(err, "grant")
		_, _ = t.s.prov.DriverGrantBucketAccess(t.ctx, t.keyGrant(p, readOnly, id).grantRequest(account))
		_, _ = t.s.prov.DriverGenerateBucketAccessId(t.ctx, t.keyGrant(p, readOnly, id).generateRequest(name))
	}},
	// Secrets
	{"Secrets/the driver logs no credential", func(t *T) {
		if t.s.cfg.DriverLogs == nil {
			t.Skipf("no driver logs configured (run the driver at its highest verbosity and give its log)")
		}
		// Grant once more so that there is a credential to look for even when run alone.
		p := t.protocols()[0]
		id, _ := t.createBucket(p)
		_, _, err := t.grant(t.keyGrant(p, readWrite, id))
		t.ok(err, "grant")
		logs, err := t.s.cfg.DriverLogs()
		if err != nil {
			t.Fatalf("reading the driver's logs: %v", err)
		}
		t.s.mu.Lock()
		secrets := slices.Clone(t.s.secrets)
		t.s.mu.Unlock()
		if len(secrets) == 0 {
			t.Fatalf("the driver returned no secret to look for")
		}
		// Nothing to check is not a pass: the log must show the SDK's response lines, where a
		// credential would be if the driver's own logging leaked it next to them.
		if !bytes.Contains(logs, []byte(driver.StrippedValue)) {
			t.Fatalf("the driver's log holds no response line of the SDK (no %s after a grant), so this check "+
				"has nothing to look at: log at verbosity %d (driver.LogLevelBodies) and give the whole log",
				driver.StrippedValue, driver.LogLevelBodies)
		}
		for _, secret := range secrets {
			if len(secret) >= 8 && bytes.Contains(logs, []byte(secret)) {
				t.Fatalf("the driver's log contains a credential it returned (value not shown)")
			}
		}
	}},
}

// modeCase is one access mode in one category, for the access-mode cases.
type modeCase struct {
	name     string
	category Category
	mode     cosiproto.AccessMode_Mode
	modes    *cosiproto.AccessModes
}

func (m modeCase) allows(write bool) bool {
	switch m.mode {
	case cosiproto.AccessMode_READ_WRITE:
		return true
	case cosiproto.AccessMode_READ_ONLY:
		return !write
	default:
		return write
	}
}

// accessModeCombinations returns every (category, mode) pair, each requested alone.
func accessModeCombinations() []modeCase {
	var out []modeCase
	for _, c := range []Category{ObjectData, ObjectMetadata, BucketMetadata} {
		modes := []cosiproto.AccessMode_Mode{
			cosiproto.AccessMode_READ_WRITE, cosiproto.AccessMode_READ_ONLY, cosiproto.AccessMode_WRITE_ONLY,
		}
		for _, mode := range modes {
			m := &cosiproto.AccessModes{}
			switch c {
			case ObjectData:
				m.ObjectData = mode
			case ObjectMetadata:
				m.ObjectMetadata = mode
			case BucketMetadata:
				m.BucketMetadata = mode
			}
			out = append(out, modeCase{name: c.String() + " " + mode.String(), category: c, mode: mode, modes: m})
		}
	}
	return out
}
