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

// Fault makes calls fail or stall: calls to Method ("*" for every method) fail with Code, each
// with probability Rate (0 < Rate <= 1), or only the first Count matching calls when Count > 0.
type Fault struct {
	Method string
	Code   codes.Code
	Rate   float64
	Count  int
	// After makes the driver act first and then fail: the bucket or account exists, the answer
	// is lost, as when a connection drops after the backend answered. The retryable codes mean
	// exactly that the operation may have happened.
	After bool
	// Delay holds the call this long before the driver acts. A caller that gives up meanwhile
	// ends the call, and the driver does not act, as a driver that passes its context on to its
	// backend; with Late the driver acts all the same, after its caller gave up, as a backend
	// that had the request already. With Code OK the call then succeeds (a slow call); otherwise
	// it fails with Code.
	Delay time.Duration
	Late  bool
}

// ParseFault reads a fault written METHOD=CODE[:RATE|:xCOUNT][+after][+delay=DURATION][+late],
// for example "DriverCreateBucket=Unavailable:0.5", "DriverGrantBucketAccess=Internal:x3",
// "*=Aborted:0.1+after" or "*=OK:0.05+delay=3s+late". Without rate or count every matching call
// fails. Code OK is allowed with a delay only, late with a delay only.
func ParseFault(s string) (Fault, error) {
	method, rest, ok := strings.Cut(s, "=")
	if !ok || method == "" {
		return Fault{}, fmt.Errorf("fault %q: want METHOD=CODE[:RATE|:xCOUNT][+after][+delay=DURATION][+late]", s)
	}
	rest, options, _ := strings.Cut(rest, "+")
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
	for o := range strings.SplitSeq(options, "+") {
		switch name, value, _ := strings.Cut(o, "="); name {
		case "":
		case "after":
			f.After = true
		case "late":
			f.Late = true
		case "delay":
			d, err := time.ParseDuration(value)
			if err != nil || d <= 0 {
				return Fault{}, fmt.Errorf("fault %q: delay %q is not a positive duration", s, value)
			}
			f.Delay = d
		default:
			return Fault{}, fmt.Errorf("fault %q: unknown option %q (after, delay=DURATION, late)", s, o)
		}
	}
	if (f.Code == codes.OK || f.Late) && f.Delay == 0 {
		return Fault{}, fmt.Errorf("fault %q: code OK and late need a delay", s)
	}
	return f, nil
}

// String writes the fault as ParseFault reads it.
func (f Fault) String() string {
	s := f.Method + "=" + f.Code.String()
	switch {
	case f.Count > 0:
		s += ":x" + strconv.Itoa(f.Count)
	case f.Rate < 1:
		s += ":" + strconv.FormatFloat(f.Rate, 'g', -1, 64)
	}
	if f.After {
		s += "+after"
	}
	if f.Delay > 0 {
		s += "+delay=" + f.Delay.String()
	}
	if f.Late {
		s += "+late"
	}
	return s
}

// Faults injects latency, failures and pauses into the driver's calls, for tests and benchmarks.
// The zero value injects nothing; Set changes it at any time, Pause holds one call inside the
// driver (see Pause).
type Faults struct {
	mu      sync.Mutex
	latency time.Duration
	faults  []Fault
	rng     *rand.Rand
	pause   *pause
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

// Seed restarts the random choices of the rated faults from seed (the default is a fixed seed).
func (f *Faults) Seed(seed uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rng = rand.New(rand.NewPCG(seed, 2))
}

// Interceptor returns the gRPC interceptor that applies the faults and pauses.
func (f *Faults) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		latency, fault := f.next(method)
		if latency > 0 {
			select {
			case <-time.After(latency):
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		if fault != nil && fault.Delay > 0 {
			if fault.Late {
				time.Sleep(fault.Delay) // the point: a backend that acts after its caller gave up
				// and a handler that passes its context on (a proxy in front of a driver) acts too.
				ctx = context.WithoutCancel(ctx)
			} else {
				select {
				case <-time.After(fault.Delay):
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
		}
		failing := fault != nil && fault.Code != codes.OK
		if failing && !fault.After {
			return nil, status.Errorf(fault.Code, injectedPrefix+"%s fails with %v", method, fault.Code)
		}
		if err := f.hold(ctx, method, false, req); err != nil {
			return nil, err
		}
		// A failure after the driver acted goes with the driver's answer: gRPC sends only the error,
		// and the journal (an interceptor before this one) records what the driver issued.
		resp, err := handler(ctx, req)
		if herr := f.hold(ctx, method, true, req); herr != nil && err == nil {
			return resp, herr
		}
		if failing && err == nil {
			return resp, status.Errorf(fault.Code, injectedPrefix+"%s fails with %v"+injectedAfterSuffix, method, fault.Code)
		}
		return resp, err
	}
}

// The messages of injected failures start with injectedPrefix; those after the driver acted end
// with injectedAfterSuffix (the journal tells them apart by these).
const (
	injectedPrefix      = "injected fault: "
	injectedAfterSuffix = " after the driver acted"
)

// next returns the latency of a call of method and the fault it meets, if any.
func (f *Faults) next(method string) (time.Duration, *Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := range f.faults {
		fault := &f.faults[i]
		if fault.Method != "*" && fault.Method != method {
			continue
		}
		if fault.Count > 0 {
			hit := *fault
			fault.Count--
			if fault.Count == 0 {
				fault.Method = "" // spent
			}
			return f.latency, &hit
		}
		if fault.Rate >= 1 || f.rng.Float64() < fault.Rate {
			hit := *fault
			return f.latency, &hit
		}
	}
	return f.latency, nil
}

// parseCode reads an error code by name in any of its spellings: "Unavailable", "UNAVAILABLE",
// "InvalidArgument", "INVALID_ARGUMENT", "Canceled", "CANCELLED", and "OK".
func parseCode(name string) (codes.Code, bool) {
	normalize := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "")) }
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if normalize(c.String()) == normalize(name) {
			return c, true
		}
	}
	if normalize(name) == "cancelled" {
		return codes.Canceled, true
	}
	return codes.OK, false
}
