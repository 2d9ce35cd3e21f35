package memory

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Fault makes calls fail: calls to Method ("*" for every method) fail with Code, each with
// probability Rate (0 < Rate <= 1), or only the first Count matching calls when Count > 0.
type Fault struct {
	Method string
	Code   codes.Code
	Rate   float64
	Count  int
}

// ParseFault reads a fault written METHOD=CODE[:RATE|:xCOUNT], for example
// "DriverCreateBucket=Unavailable:0.5", "DriverGrantBucketAccess=Internal:x3" or
// "*=ResourceExhausted". Without rate or count every matching call fails.
func ParseFault(s string) (Fault, error) {
	method, rest, ok := strings.Cut(s, "=")
	if !ok || method == "" {
		return Fault{}, fmt.Errorf("fault %q: want METHOD=CODE[:RATE|:xCOUNT]", s)
	}
	codeName, arg, _ := strings.Cut(rest, ":")
	code, ok := parseCode(codeName)
	if !ok {
		return Fault{}, fmt.Errorf("fault %q: %q is not a gRPC error code", s, codeName)
	}
	f := Fault{Method: method, Code: code, Rate: 1}
	switch {
	case arg == "":
	case strings.HasPrefix(arg, "x"):
		n, err := strconv.Atoi(arg[1:])
		if err != nil || n <= 0 {
			return Fault{}, fmt.Errorf("fault %q: count %q is not a positive number", s, arg)
		}
		f.Count = n
	default:
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r <= 0 || r > 1 {
			return Fault{}, fmt.Errorf("fault %q: rate %q is not in (0, 1]", s, arg)
		}
		f.Rate = r
	}
	return f, nil
}

// Faults injects latency and failures into the driver's calls, for tests and benchmarks. The zero
// value injects nothing; Set changes it at any time.
type Faults struct {
	mu      sync.Mutex
	latency time.Duration
	faults  []Fault
	rng     *rand.Rand
}

// Set replaces the latency added to every call and the faults. Fault counts restart.
func (f *Faults) Set(latency time.Duration, faults ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.latency = latency
	f.faults = append([]Fault(nil), faults...)
	if f.rng == nil {
		f.rng = rand.New(rand.NewPCG(1, 2)) // deterministic, so a failing run can be repeated
	}
}

// Interceptor returns the gRPC interceptor that applies the faults.
func (f *Faults) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		latency, err := f.next(method)
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		if err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

func (f *Faults) next(method string) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.faults {
		fault := &f.faults[i]
		if fault.Method != "*" && fault.Method != method {
			continue
		}
		if fault.Count > 0 {
			fault.Count--
			if fault.Count == 0 {
				fault.Method = "" // spent
			}
			return f.latency, status.Errorf(fault.Code, "injected fault: %s fails with %v", method, fault.Code)
		}
		if fault.Rate >= 1 || f.rng.Float64() < fault.Rate {
			return f.latency, status.Errorf(fault.Code, "injected fault: %s fails with %v", method, fault.Code)
		}
	}
	return f.latency, nil
}

// parseCode reads an error code by name in any of its spellings: "Unavailable", "UNAVAILABLE",
// "InvalidArgument", "INVALID_ARGUMENT", "Canceled", "CANCELLED".
func parseCode(name string) (codes.Code, bool) {
	normalize := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	for c := codes.Canceled; c <= codes.Unauthenticated; c++ {
		if normalize(c.String()) == normalize(name) {
			return c, true
		}
	}
	if normalize(name) == "cancelled" {
		return codes.Canceled, true
	}
	return codes.OK, false
}
