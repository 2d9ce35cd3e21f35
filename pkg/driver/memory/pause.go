package memory

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// PausedCall is a call that Faults holds inside the driver.
type PausedCall struct {
	// Method is the RPC ("DriverCreateBucket").
	Method string `json:"method"`
	// After says the driver had acted (created, granted, deleted, revoked) when the call was held:
	// only the answer is outstanding.
	After bool `json:"after"`
	// Subject is the bucket or account the call is about (see Subject).
	Subject string `json:"subject"`
}

// pause is one armed Pause: it catches the first matching call.
type pause struct {
	method  string
	after   bool
	caught  chan PausedCall // receives the caught call, once
	release chan struct{}   // closed by Release or Abort
	taken   bool
	// aborted makes the held call fail as if the driver had died holding it (Abort).
	aborted bool
}

// Pause holds the next call of method ("*" for any) inside the driver, before the driver acts or,
// with after, once it has acted and before it answers, until Release or until the caller gives up:
// a fault suite kills a process while the call is held, so that the crash lands exactly between a
// driver's action and its answer, or between the two phases of a create or a grant. A new Pause
// releases the previous one. WaitPaused says when a call is held.
func (f *Faults) Pause(method string, after bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pause != nil {
		close(f.pause.release)
	}
	f.pause = &pause{method: method, after: after, caught: make(chan PausedCall, 1), release: make(chan struct{})}
}

// WaitPaused waits until the armed Pause holds a call, and returns it; false when ctx ends first
// or no Pause is armed.
func (f *Faults) WaitPaused(ctx context.Context) (PausedCall, bool) {
	f.mu.Lock()
	p := f.pause
	f.mu.Unlock()
	if p == nil {
		return PausedCall{}, false
	}
	select {
	case c := <-p.caught:
		p.caught <- c // WaitPaused may be asked again
		return c, true
	case <-ctx.Done():
		return PausedCall{}, false
	}
}

// Release lets the held call, if any, go on, and disarms the Pause.
func (f *Faults) Release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pause != nil {
		close(f.pause.release)
		f.pause = nil
	}
}

// Abort ends the held call, if any, with Unavailable, as if the driver had died while it was held
// (its action, with after, done; its answer lost), and disarms the Pause. A fault suite that
// holds calls in a proxy in front of a driver calls it when it kills the driver.
func (f *Faults) Abort() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pause != nil {
		f.pause.aborted = true
		close(f.pause.release)
		f.pause = nil
	}
}

// hold holds the call if the armed Pause matches it at this point (after the driver acted or
// before), until Release or until the caller gives up.
func (f *Faults) hold(ctx context.Context, method string, after bool, req any) error {
	f.mu.Lock()
	p := f.pause
	if p == nil || p.taken || p.after != after || (p.method != "*" && p.method != method) {
		f.mu.Unlock()
		return nil
	}
	p.taken = true
	f.mu.Unlock()
	p.caught <- PausedCall{Method: method, After: after, Subject: Subject(req)}
	select {
	case <-p.release:
		f.mu.Lock()
		defer f.mu.Unlock()
		if p.aborted {
			return status.Error(codes.Unavailable, "the driver died while the call was held")
		}
		return nil
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// Subject is the bucket or account a driver request is about: its bucket ID or account ID, or the
// name phase 1 derives one from; empty for DriverGetInfo. Requests of the cosi.v1alpha1 protocol
// are named the same way (a fault suite's proxy in front of a v1alpha1 driver applies Faults and
// Journal too): a grant by the account name it asks for, a create by the bucket's name.
func Subject(req any) string {
	switch r := req.(type) {
	case *cosiproto.DriverGenerateBucketIdRequest:
		return r.GetName()
	case *cosiproto.DriverCreateBucketRequest:
		return r.GetBucketId()
	case *cosiproto.DriverGetBucketRequest:
		return r.GetBucketId()
	case *cosiproto.DriverDeleteBucketRequest:
		return r.GetBucketId()
	case *cosiproto.DriverGenerateBucketAccessIdRequest:
		return r.GetAccountName()
	case *cosiproto.DriverGrantBucketAccessRequest:
		return r.GetAccountId()
	case *cosiproto.DriverRevokeBucketAccessRequest:
		return r.GetAccountId()
	case *cosiproto.DriverRotateBucketAccessCredentialsRequest:
		return r.GetAccountId()
	case *cosiproto.DriverRetireBucketAccessCredentialsRequest:
		return r.GetAccountId()
	case *cosiproto.DriverGetBucketUsageRequest:
		return r.GetBucketId()
	}
	// The cosi.v1alpha1 requests (a fault proxy in front of a v1alpha1 driver), read by reflection:
	// this package serves the v1alpha2 protocol, and the drivers built on it must not link the
	// v1alpha1 module (test/imports).
	field := map[protoreflect.Name]protoreflect.Name{
		"DriverCreateBucketRequest":       "name",
		"DriverDeleteBucketRequest":       "bucket_id",
		"DriverGrantBucketAccessRequest":  "name",
		"DriverRevokeBucketAccessRequest": "account_id",
	}
	if m, ok := req.(proto.Message); ok {
		return v1alpha1Field(m, field[m.ProtoReflect().Descriptor().Name()])
	}
	return ""
}

// v1alpha1Field is the string field name of m when m is a cosi.v1alpha1 message, else "".
func v1alpha1Field(m proto.Message, name protoreflect.Name) string {
	r := m.ProtoReflect()
	d := r.Descriptor()
	if name == "" || d.ParentFile().Package() != "cosi.v1alpha1" {
		return ""
	}
	f := d.Fields().ByName(name)
	if f == nil || f.Kind() != protoreflect.StringKind {
		return ""
	}
	return r.Get(f).String()
}
