package memory

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/status"

	cosiproto "github.com/kube-cosi/cosi/proto"
)

// Calls counts the calls a driver serves, for tests that assert how often COSI called it: per
// method ("DriverGrantBucketAccess"), per method and code ("DriverGrantBucketAccess/OK"), and,
// for successful calls, per method and the account or bucket they were for
// ("DriverGrantBucketAccess/<account ID>", "DriverGrantBucketAccess/bucket/<bucket ID>",
// "DriverCreateBucket/<bucket ID>", "DriverRevokeBucketAccess/<account ID>"). Put its interceptor
// before Faults.Interceptor to count the injected failures too.
type Calls struct {
	mu     sync.Mutex
	counts map[string]int
}

// Interceptor returns the gRPC interceptor that counts.
func (c *Calls) Interceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := handler(ctx, req)
		method := info.FullMethod[strings.LastIndex(info.FullMethod, "/")+1:]
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.counts == nil {
			c.counts = map[string]int{}
		}
		c.counts[method]++
		c.counts[method+"/"+status.Code(err).String()]++
		if err != nil {
			return resp, err
		}
		switch r := req.(type) {
		case *cosiproto.DriverGrantBucketAccessRequest:
			c.counts[method+"/"+r.GetAccountId()]++
			for _, b := range r.GetBuckets() {
				c.counts[method+"/bucket/"+b.GetBucketId()]++
			}
		case *cosiproto.DriverRevokeBucketAccessRequest:
			c.counts[method+"/"+r.GetAccountId()]++
		case *cosiproto.DriverCreateBucketRequest:
			c.counts[method+"/"+r.GetBucketId()]++
		}
		return resp, err
	}
}

// Count returns a count by its key (see Calls).
func (c *Calls) Count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[key]
}

// String lists every count, for test failure messages.
func (c *Calls) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprint(maps.Clone(c.counts))
}
