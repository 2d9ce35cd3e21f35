package driver

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"

	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// recoverInterceptor turns a panic in the calls it wraps into an Internal error, so that one
// bad answer from a backend (a nil field the driver did not expect) fails one call instead of
// crash-looping the driver and failing every call in flight.
//
// What it logs cannot hold a secret: the method, the panic value's type, the stack (which shows
// argument words, not the strings or messages they point to), and the panic's message only when
// the runtime raised it (nil dereference, index out of range: types and numbers), which is told
// by the value's type being package runtime's, not by its implementing runtime.Error. A value a
// driver panics with may have been made from the request, and is not logged.
func recoverInterceptor(log logr.Logger) grpc.UnaryServerInterceptor {
	return func(
		ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler,
	) (resp any, err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			kv := []any{"method", info.FullMethod, "panicType", fmt.Sprintf("%T", r), "stack", string(debug.Stack())}
			if re, ok := r.(runtime.Error); ok && raisedByRuntime(re) {
				kv = append(kv, "panic", re.Error())
			}
			log.Error(nil, "driver panicked; the call fails with Internal", kv...)
			resp, err = nil, status.Error(
				codes.Internal,
				"the driver failed unexpectedly (it panicked; its log has the details); the call may be retried",
			)
		}()
		return handler(ctx, req)
	}
}

// raisedByRuntime reports whether err is one of the runtime's own error types. Any type can
// implement runtime.Error (it is an interface with a marker method), so the interface alone does
// not say that the message holds only types and numbers.
func raisedByRuntime(err runtime.Error) bool {
	t := reflect.TypeOf(err)
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath() == "runtime"
}
