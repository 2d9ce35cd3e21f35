package memory

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	v1 "sigs.k8s.io/container-object-storage-interface/proto"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

func TestParseFaultOptions(t *testing.T) {
	for _, tc := range []struct {
		spec    string
		want    Fault
		wantErr bool
	}{
		{spec: "*=Aborted:0.1+after", want: Fault{Method: "*", Code: codes.Aborted, Rate: 0.1, After: true}},
		{spec: "*=OK:0.05+delay=3s", want: Fault{Method: "*", Code: codes.OK, Rate: 0.05, Delay: 3 * time.Second}},
		{
			spec: "DriverCreateBucket=Unavailable:x2+after+delay=1s",
			want: Fault{
				Method: "DriverCreateBucket", Code: codes.Unavailable, Rate: 1, Count: 2, After: true,
				Delay: time.Second,
			},
		},
		{
			spec: "*=OK:0.05+delay=3s+late",
			want: Fault{Method: "*", Code: codes.OK, Rate: 0.05, Delay: 3 * time.Second, Late: true},
		},
		{spec: "*=OK:0.5", wantErr: true},
		{spec: "*=Unavailable+late", wantErr: true},
		{spec: "*=Unavailable+later", wantErr: true},
		{spec: "*=Unavailable+delay=soon", wantErr: true},
	} {
		got, err := ParseFault(tc.spec)
		if (err != nil) != tc.wantErr || (!tc.wantErr && got != tc.want) {
			t.Errorf("ParseFault(%q) = %+v, %v; want %+v, error %v", tc.spec, got, err, tc.want, tc.wantErr)
		}
		if err == nil {
			if again, err := ParseFault(got.String()); err != nil || again != got {
				t.Errorf("ParseFault(%q.String() = %q) = %+v, %v", tc.spec, got.String(), again, err)
			}
		}
	}
}

// serve calls the driver's method through the interceptors, as its gRPC server would.
func serve(
	ctx context.Context,
	d *Driver,
	req any,
	interceptors ...grpc.UnaryServerInterceptor,
) (any, error) {
	var method string
	var handler grpc.UnaryHandler
	switch r := req.(type) {
	case *cosiproto.DriverCreateBucketRequest:
		method = "DriverCreateBucket"
		handler = func(ctx context.Context, _ any) (any, error) { return d.DriverCreateBucket(ctx, r) }
	case *cosiproto.DriverGrantBucketAccessRequest:
		method = "DriverGrantBucketAccess"
		handler = func(ctx context.Context, _ any) (any, error) { return d.DriverGrantBucketAccess(ctx, r) }
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		method = "DriverRotateBucketAccessCredentials"
		handler = func(ctx context.Context, _ any) (any, error) { return d.DriverRotateBucketAccessCredentials(ctx, r) }
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		method = "DriverRetireBucketAccessCredentials"
		handler = func(ctx context.Context, _ any) (any, error) { return d.DriverRetireBucketAccessCredentials(ctx, r) }
	}
	info := &grpc.UnaryServerInfo{FullMethod: "/cosi.v1alpha2.Provisioner/" + method}
	for i := len(interceptors) - 1; i >= 0; i-- {
		next, icp := handler, interceptors[i]
		handler = func(ctx context.Context, req any) (any, error) { return icp(ctx, req, info, next) }
	}
	return handler(ctx, req)
}

// An "after" fault fails the call once the driver has acted: the bucket exists, the caller got
// an error.
func TestFaultAfter(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	var journal strings.Builder
	j := &Journal{W: &journal}
	f.Set(0, Fault{Method: "DriverCreateBucket", Code: codes.Unavailable, Count: 1, After: true})
	_, err = serve(t.Context(), d, &cosiproto.DriverCreateBucketRequest{BucketId: "b1"}, j.Interceptor(), f.Interceptor())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want the injected Unavailable", err)
	}
	if !d.Backend().BucketExists("b1") {
		t.Error("an after fault kept the driver from acting")
	}
	entries, err := ReadJournal(strings.NewReader(journal.String()))
	if err != nil || len(entries) != 1 || !entries[0].Injected || !entries[0].Acted {
		t.Errorf("journal %+v, %v; want one injected failure after the driver acted", entries, err)
	}
}

// A rotation whose answer a fault loses after the driver acted: the journal names the credential
// it issued all the same, so that a fault suite can order the keys of an account by the calls that
// issued them, the lost ones included.
func TestJournalIssuedLost(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := d.DriverCreateBucket(ctx, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}); err != nil {
		t.Fatal(err)
	}
	granted, err := d.DriverGrantBucketAccess(ctx, grantRequest("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	var journal strings.Builder
	j := &Journal{W: &journal}
	f.Set(0, Fault{Method: "DriverRotateBucketAccessCredentials", Code: codes.Unavailable, Count: 1, After: true})
	_, err = serve(ctx, d, &cosiproto.DriverRotateBucketAccessCredentialsRequest{AccountId: "a",
		Buckets: grantRequest("a", "b").GetBuckets(), Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY, CredentialId: granted.GetCredentialId()},
		j.Interceptor(), f.Interceptor())
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("got %v, want the injected Unavailable", err)
	}
	keys := d.Backend().AccountKeys("a")
	entries, err := ReadJournal(strings.NewReader(journal.String()))
	if err != nil || len(entries) != 1 || len(keys) != 2 {
		t.Fatalf("journal %+v, %v, %d keys; want one entry and two keys", entries, err, len(keys))
	}
	if issued := d.Backend().CredentialID(keys[0]); entries[0].Issued != issued || !entries[0].Acted {
		t.Errorf("journal %+v; want the lost rotation, acted, with the credential it issued (%s)", entries[0], issued)
	}
}

// The journal names the account of a rotation and a retirement, the credential each replaces or
// revokes, and the credential a grant or a rotation issued (none of them secret), so that a fault
// suite knows which keys a rotation replaced.
func TestJournalRotation(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var journal strings.Builder
	j := &Journal{W: &journal}
	ctx := t.Context()
	if _, err := serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}, j.Interceptor()); err != nil {
		t.Fatal(err)
	}
	granted, err := serve(ctx, d, grantRequest("a", "b"), j.Interceptor())
	if err != nil {
		t.Fatal(err)
	}
	from := granted.(*cosiproto.DriverGrantBucketAccessResponse).GetCredentialId()
	rotated, err := serve(ctx, d, &cosiproto.DriverRotateBucketAccessCredentialsRequest{AccountId: "a",
		Buckets: grantRequest("a", "b").GetBuckets(), Protocol: cosiproto.ObjectProtocol_S3,
		AuthenticationType: cosiproto.AuthenticationType_KEY, CredentialId: from}, j.Interceptor())
	if err != nil {
		t.Fatal(err)
	}
	to := rotated.(*cosiproto.DriverRotateBucketAccessCredentialsResponse).GetCredentialId()
	if _, err := serve(ctx, d, &cosiproto.DriverRetireBucketAccessCredentialsRequest{AccountId: "a",
		CredentialId: from}, j.Interceptor()); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadJournal(strings.NewReader(journal.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := []JournalEntry{
		{Method: "DriverCreateBucket", Subject: "b", Code: "OK"},
		{Method: "DriverGrantBucketAccess", Subject: "a", Code: "OK", Issued: from},
		{Method: "DriverRotateBucketAccessCredentials", Subject: "a", Code: "OK", Credential: from, Issued: to},
		{Method: "DriverRetireBucketAccessCredentials", Subject: "a", Code: "OK", Credential: from},
	}
	if len(entries) != len(want) {
		t.Fatalf("journal %+v, want %+v", entries, want)
	}
	for i, e := range entries {
		e.Time, e.Took = time.Time{}, 0
		if e != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, e, want[i])
		}
	}
	if from == "" || to == "" || from == to {
		t.Errorf("credentials %q and %q: want two different ones", from, to)
	}
}

// A delayed call whose caller gives up ends without acting; a late one acts all the same.
func TestFaultDelay(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	f.Set(0, Fault{Method: "*", Code: codes.OK, Rate: 1, Delay: time.Minute})
	_, err = serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "slow"}, f.Interceptor())
	if status.Code(err) != codes.Canceled || d.Backend().BucketExists("slow") {
		t.Errorf("a slow call whose caller gave up: %v, bucket created %v", err, d.Backend().BucketExists("slow"))
	}
	f.Set(0, Fault{Method: "*", Code: codes.OK, Rate: 1, Delay: 50 * time.Millisecond, Late: true})
	if _, err := serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "late"}, f.Interceptor()); err != nil {
		t.Fatal(err)
	}
	if !d.Backend().BucketExists("late") {
		t.Error("the late call did not act")
	}
}

// Pause holds a call before or after the driver acts, until Release; the control endpoint drives
// it from another process, and the journal records the call.
func TestPauseThroughControl(t *testing.T) {
	for _, after := range []bool{false, true} {
		d, err := New(Config{})
		if err != nil {
			t.Fatal(err)
		}
		f := &Faults{}
		var journal strings.Builder
		j := &Journal{W: &journal}
		srv := httptest.NewServer(f.Handler())
		defer srv.Close()
		c := Control{Address: strings.TrimPrefix(srv.URL, "http://")}
		ctx := t.Context()
		if err := c.SetFaults(ctx, FaultSettings{Faults: []string{"DriverGrantBucketAccess=Internal"}, Seed: 7}); err != nil {
			t.Fatal(err)
		}
		if err := c.SetFaults(ctx, FaultSettings{Faults: []string{"nonsense"}}); err == nil {
			t.Error("the control endpoint took a fault it cannot parse")
		}
		if err := c.Pause(ctx, "DriverCreateBucket", after); err != nil {
			t.Fatal(err)
		}
		if _, held, err := c.WaitPaused(ctx, 10*time.Millisecond); err != nil || held {
			t.Fatalf("a call is held before any was made: %v %v", held, err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}, j.Interceptor(), f.Interceptor())
			done <- err
		}()
		p, held, err := c.WaitPaused(ctx, time.Minute)
		if err != nil || !held {
			t.Fatalf("no call held: %v", err)
		}
		if want := (PausedCall{Method: "DriverCreateBucket", After: after, Subject: "b"}); p != want {
			t.Errorf("held %+v, want %+v", p, want)
		}
		if got := d.Backend().BucketExists("b"); got != after {
			t.Errorf("after=%v: the bucket exists while the call is held: %v", after, got)
		}
		select {
		case err := <-done:
			t.Fatalf("the call returned while held: %v", err)
		default:
		}
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		// The pause caught one call only.
		if _, err := serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "c"}, f.Interceptor()); err != nil {
			t.Fatal(err)
		}
		_, err = serve(ctx, d, grantRequest("a", "b"), j.Interceptor(), f.Interceptor())
		if status.Code(err) != codes.Internal {
			t.Errorf("the fault set through the control endpoint: %v", err)
		}
		entries, err := ReadJournal(strings.NewReader(journal.String() + `{"method": "cut sh`))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 || entries[0].Subject != "b" || entries[0].Code != "OK" ||
			entries[1].Subject != "a" || entries[1].Code != "Internal" || !entries[1].Injected || entries[1].Acted {
			t.Errorf("journal %+v", entries)
		}
	}
}

// A held call whose caller gives up returns at once.
func TestPauseCallerGone(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	f.Pause("*", false)
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		if _, ok := f.WaitPaused(t.Context()); ok {
			cancel()
		}
	}()
	_, err = serve(ctx, d, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}, f.Interceptor())
	if status.Code(err) != codes.Canceled {
		t.Errorf("got %v, want Canceled", err)
	}
	if d.Backend().BucketExists("b") {
		t.Error("a call held before the driver acted acted after its caller gave up")
	}
}

// Abort ends a held call as a dying driver would: the action (with after) done, the answer lost.
func TestPauseAbort(t *testing.T) {
	d, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	var f Faults
	f.Pause("DriverCreateBucket", true)
	done := make(chan error, 1)
	go func() {
		_, err := serve(t.Context(), d, &cosiproto.DriverCreateBucketRequest{BucketId: "b"}, f.Interceptor())
		done <- err
	}()
	if _, ok := f.WaitPaused(t.Context()); !ok {
		t.Fatal("no call held")
	}
	f.Abort()
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Errorf("an aborted call: %v, want Unavailable", err)
	}
	if !d.Backend().BucketExists("b") {
		t.Error("the driver did not act before the call was held")
	}
}

// A late call's handler gets a context its caller's end does not cancel: a handler that passes it
// on acts too.
func TestFaultLateDetachesTheContext(t *testing.T) {
	var f Faults
	f.Set(0, Fault{Method: "*", Code: codes.OK, Rate: 1, Delay: time.Millisecond, Late: true})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var handlerErr error
	_, err := f.Interceptor()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/p/DriverCreateBucket"},
		func(ctx context.Context, _ any) (any, error) { handlerErr = ctx.Err(); return "ok", nil })
	if err != nil || handlerErr != nil {
		t.Errorf("late call: %v; the handler's context: %v", err, handlerErr)
	}
}

// Faults and Journal serve a proxy in front of a cosi.v1alpha1 driver as they serve a v1alpha2
// one: faults and pauses match the v1alpha1 methods by name, and the journal names the account a
// grant asks for and the one the driver answered with when it named the account itself.
func TestV1alpha1Calls(t *testing.T) {
	const chosen = "ba-0123abcd"
	acted := 0
	call := func(ctx context.Context, interceptors ...grpc.UnaryServerInterceptor) (any, error) {
		info := &grpc.UnaryServerInfo{FullMethod: "/cosi.v1alpha1.Provisioner/DriverGrantBucketAccess"}
		var handler grpc.UnaryHandler = func(context.Context, any) (any, error) {
			acted++
			return &v1.DriverGrantBucketAccessResponse{AccountId: chosen}, nil
		}
		for i := len(interceptors) - 1; i >= 0; i-- {
			next, icp := handler, interceptors[i]
			handler = func(ctx context.Context, req any) (any, error) { return icp(ctx, req, info, next) }
		}
		return handler(ctx, &v1.DriverGrantBucketAccessRequest{BucketId: "b", Name: "ba-uid"})
	}
	var journal strings.Builder
	j := &Journal{W: &journal}
	f := &Faults{}
	f.Set(0, Fault{Method: "DriverGrantBucketAccess", Code: codes.Unavailable, Count: 1, After: true})
	if _, err := call(t.Context(), j.Interceptor(), f.Interceptor()); status.Code(err) != codes.Unavailable ||
		acted != 1 {
		t.Fatalf("a fault after the driver acted: %v, the driver acted %d times", err, acted)
	}
	f.Pause("DriverGrantBucketAccess", true)
	done := make(chan error, 1)
	go func() {
		_, err := call(t.Context(), j.Interceptor(), f.Interceptor())
		done <- err
	}()
	held, ok := f.WaitPaused(t.Context())
	if want := (PausedCall{Method: "DriverGrantBucketAccess", After: true, Subject: "ba-uid"}); !ok || held != want {
		t.Errorf("held %+v (%v), want %+v", held, ok, want)
	}
	f.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	entries, err := ReadJournal(strings.NewReader(journal.String()))
	if err != nil {
		t.Fatal(err)
	}
	want := []JournalEntry{
		{Method: "DriverGrantBucketAccess", Subject: "ba-uid", Code: "Unavailable", Injected: true, Acted: true,
			Account: chosen},
		{Method: "DriverGrantBucketAccess", Subject: "ba-uid", Code: "OK", Account: chosen},
	}
	if len(entries) != len(want) {
		t.Fatalf("journal %+v, want %+v", entries, want)
	}
	for i, e := range entries {
		e.Time, e.Took = time.Time{}, 0
		if e != want[i] {
			t.Errorf("entry %d: %+v, want %+v", i, e, want[i])
		}
	}
	for _, tc := range []struct {
		req  any
		want string
	}{
		{&v1.DriverCreateBucketRequest{Name: "bc-1"}, "bc-1"},
		{&v1.DriverDeleteBucketRequest{BucketId: "bc-1"}, "bc-1"},
		{&v1.DriverRevokeBucketAccessRequest{BucketId: "bc-1", AccountId: chosen}, chosen},
	} {
		if got := Subject(tc.req); got != tc.want {
			t.Errorf("Subject(%T) = %q, want %q", tc.req, got, tc.want)
		}
	}
}
