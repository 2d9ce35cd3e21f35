// Package driver is the SDK for writing a COSI driver. The client the COSI sidecar uses to call
// one is package driverclient: a driver's binary links neither it nor the v1alpha1 protocol.
//
// A driver implements cosiproto.IdentityServer and cosiproto.ProvisionerServer (package
// github.com/kube-cosi/cosi/proto) and hands them to Run, which serves them on the Unix socket
// named by COSI_ENDPOINT until SIGTERM. The SDK does the parts every driver must get right:
//   - the endpoint rules of the COSI spec (unix:// only, a path ending in ".sock", a stale socket
//     removed only when nobody listens on it, a restricted socket mode, graceful stop);
//   - request validation: a request missing a required field, or with an invalid value, is
//     answered with InvalidArgument before the driver sees it, so drivers cannot forget it;
//   - logging that never prints a field marked cosi_secret (see StripSecrets);
//   - Prometheus metrics per method and gRPC code.
//
// The package imports neither controller-runtime nor client-go.
package driver
